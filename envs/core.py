"""The batched-environment contract (``BatchedEnv``) and its synchronous implementation (``SyncBatchedEnv``).

``BatchedEnv`` owns the contract that every backend shares: ``step`` validates and clips actions, keeps the
episode statistics and assembles the info dict; ``reset`` applies the seed given to ``make`` on the first reset.
A backend only implements ``_reset(seed)`` and ``_step(action) -> BackendStep`` on top of its simulator: a list
of single gymnasium envs (``SyncBatchedEnv``, for ``gym:``, ``dmc:`` and ``arm:``), a torch task on CPU MuJoCo
(``mujoco:``, ``robot_rl.envs.mujoco_backend``), MJX or Warp (``robot_rl.envs.sim``), or an already batched
Isaac Lab env (``robot_rl.envs.isaaclab_backend``).

``SyncBatchedEnv`` steps a list of single gymnasium envs with flat float32 observations and actions normalised
to [-1, 1] (see ``robot_rl.envs.wrappers``) in one Python loop and speaks torch to the learner. We deliberately do
not use gymnasium's vector envs: the async one is slower on few cores, and the sync one's autoreset happens on
the *next* step, which would make every learner deal with a dead transition. Here, as in every backend, a
finished sub-env is reset inside the same ``step`` and its true last observation is handed back in
``info["final_obs"]`` so truncated episodes can be bootstrapped.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from robot_rl.errors import UserError

Obs = dict[str, torch.Tensor]
StepResult = tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]

_SUCCESS_KEYS = ("success", "is_success")


class BackendStep(NamedTuple):
    """What a backend's ``_step`` returns; ``BatchedEnv.step`` turns it into the contract's step result.

    All tensors are on the env's ``device`` with the batch dimension first. ``obs`` is already the first
    observation of the next episode for envs that finished (the backend autoresets them). ``reward`` may be
    float64 (episode returns are summed in float64 before the float32 reward is handed out). ``final_obs`` is
    the true last observation of every env (rows of unfinished envs equal ``obs``); ``None`` means it equals
    ``obs`` (nothing finished) and a copy is made. ``info`` holds backend-specific entries such as
    ``"success"`` (bool [N]); ``None`` = none.
    """

    obs: Obs
    reward: torch.Tensor
    terminated: torch.Tensor
    truncated: torch.Tensor
    final_obs: Obs | None = None
    info: dict[str, Any] | None = None


class Reflection(NamedTuple):
    """A mirror symmetry of a task (``BatchedEnv.reflection``): multiplying every ``state`` observation by ``state``
    and every action by ``action`` (float32 +-1 vectors on the CPU), and flipping the frames of the camera groups in
    ``cameras`` left to right, turns an episode into another episode of the same task, with the same rewards. A
    camera belongs in ``cameras`` when it lies in the mirror plane with its image x axis across it."""

    state: torch.Tensor
    action: torch.Tensor
    cameras: tuple[str, ...] = ()

    @classmethod
    def from_signs(cls, state: Any, action: Any, cameras: Sequence[str] = ()) -> Reflection:
        """From a task's sign arrays (``ArmTask.reflection``) and its mirrored camera groups."""
        return cls(torch.as_tensor(state, dtype=torch.float32).clone(),
                   torch.as_tensor(action, dtype=torch.float32).clone(), tuple(cameras))

    @staticmethod
    def flip(frames: torch.Tensor) -> torch.Tensor:
        """Frames ``[..., H, W, C]`` reflected: flipped left to right."""
        return frames.flip(-2)

    def observation(self, obs: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """An observation dict reflected: ``state`` times the signs, the ``cameras`` groups' frames flipped, any other
        group as it is."""
        out = dict(obs)
        if "state" in out:
            out["state"] = out["state"] * self.state.to(out["state"])
        for group in self.cameras:
            if group in out:
                out[group] = self.flip(out[group])
        return out


class UnknownEnvError(UserError, ValueError):
    """Raised by ``robot_rl.envs.make`` for a spec no backend knows; the message names the valid choices."""


@dataclass(frozen=True)
class EnvOptions:
    """Options shared by all backends, validated once so backends can trust them.

    ``max_episode_steps`` and the time limit count agent steps, i.e. steps *after* action repeat, because
    that is what the learner sees and what its discounting is defined over.
    """

    action_repeat: int = 1
    max_episode_steps: int | None = None
    render: bool = False
    render_size: tuple[int, int] = (240, 320)
    camera_id: int | None = None
    # Camera observations' (height, width) where a spec has them (arm -pixels); None: the backend's default.
    # Separate from render_size because a video and the images a network learns from want different sizes.
    pixel_size: tuple[int, int] | None = None
    # arm -pixels specs: `state` is the full task state instead of proprioception (frames rendered for a camera
    # reward classifier beside a state learner; robot_rl.classifier_reward). Other backends have no cameras.
    full_state: bool = False
    # arm tasks: False keeps an episode going past the task's success (only the time limit, or a reward classifier
    # around the env, ends it): training on a learned reward. Other backends' tasks do not end at a success.
    end_on_success: bool = True
    # arm tasks: autonomous practice (reset-free): a new episode keeps the cube where it is (arm home, new target);
    # only a stuck scene is reset, counted as a human reset (``ArmEnv``'s ``practice``; ``info["human_reset"]``).
    practice: bool = False
    # practice: what puts the scene back between episodes: "expert" (a scripted reset controller moves the cube to
    # a fresh start; info["reset_steps"]) or "home" (only the arm goes home). ``ArmEnv``'s ``practice_reset``.
    practice_reset: str = "expert"

    def __post_init__(self) -> None:
        if not _is_int(self.action_repeat) or self.action_repeat < 1:
            raise ValueError(f"action_repeat must be an int >= 1, got {self.action_repeat!r}")
        if self.max_episode_steps is not None and (
            not _is_int(self.max_episode_steps) or self.max_episode_steps < 1
        ):
            raise ValueError(f"max_episode_steps must be None or an int >= 1, got {self.max_episode_steps!r}")
        size = tuple(self.render_size)
        if len(size) != 2 or not all(_is_int(s) and s > 0 for s in size):
            raise ValueError(
                f"render_size must be (height, width) of positive ints, got {self.render_size!r}"
            )
        object.__setattr__(self, "render_size", (int(size[0]), int(size[1])))
        if self.pixel_size is not None:
            pixels = tuple(self.pixel_size)
            if len(pixels) != 2 or not all(_is_int(s) and s > 0 for s in pixels):
                raise ValueError(f"pixel_size must be (height, width) of positive ints, got {self.pixel_size!r}")
            object.__setattr__(self, "pixel_size", (int(pixels[0]), int(pixels[1])))
        if self.practice_reset not in ("expert", "home"):
            raise ValueError(f"practice_reset must be 'expert' or 'home', got {self.practice_reset!r}")
        if self.camera_id is not None and not _is_int(self.camera_id):
            raise ValueError(f"camera_id must be an int, got {self.camera_id!r}")


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


class BatchedEnv(abc.ABC):
    """A batch of ``num_envs`` independent copies of one task, spoken to in torch tensors.

    Contract (what learners may rely on):

    * ``reset(seed=None) -> obs`` and ``step(action) -> (obs, reward, terminated, truncated, info)``.
      All tensors live on ``device`` with the batch dimension first. ``obs`` is a dict of named groups
      (``observation_spec`` lists their per-env shape and dtype); reward is float32 [N]; terminated and
      truncated are bool [N].
    * Actions are float [N, action_dim] in [-1, 1]; values outside are clipped, non-finite values raise
      ``ValueError`` before anything is sent to a simulator.
    * Autoreset happens inside ``step``: a finished sub-env already returns the first observation of its next
      episode; ``info["final_obs"]`` (same structure as obs, full batch) holds the true last observation
      (rows of unfinished envs equal the returned obs). ``terminated`` = the MDP ended (do not bootstrap),
      ``truncated`` = a time limit (bootstrap from ``final_obs``).
    * ``info["episode_return"]`` / ``info["episode_length"]`` (float32 [N]) give the undiscounted return and
      length of episodes that just ended (0 elsewhere); ``info["success"]`` (bool [N]) only for tasks that
      report success.
    * ``reset(seed=s)`` seeds sub-env i with ``s + i``; ``reset()`` continues the RNG streams.

    Backends implement ``_reset(seed)`` and ``_step(action) -> BackendStep`` (plus ``render`` and ``close``);
    ``reset`` and ``step`` here do the rest of the contract (closed/not-reset checks, the seed given to
    ``make``, action checks and clipping, episode statistics, ``final_obs`` and the info dict), once for all.
    """

    num_envs: int
    device: torch.device
    spec: str
    observation_spec: dict[str, tuple[tuple[int, ...], torch.dtype]]
    action_dim: int
    max_episode_steps: int | None
    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Box
    control_dt: float | None = None  # simulated seconds per agent step (action repeat included); None: unknown
    # Whether an episode can end in a terminal state (``terminated``) before its time limit. False only where the
    # backend knows it cannot: dm_control tasks without a termination condition, gymnasium's own tasks without one
    # (``envs.gym_backend.WITHOUT_TERMINATION``: HalfCheetah, Swimmer, Reacher, Pusher, HumanoidStandup, Pendulum;
    # gymnasium's API declares nothing, so the backend names them) and the mujoco:/mjx:/warp: twins of both. True
    # where it cannot tell (a third-party gymnasium env). The default agent picks its critics by it
    # (`robot_rl.agents.sac.resolve_critics`).
    can_terminate: bool = True

    def reset(self, seed: int | None = None) -> Obs:
        """Reset every sub-env and return the batched first observation.

        The seed given to ``make`` applies to the first reset that gets none of its own; ``_reset`` seeds
        sub-env i with ``seed + i`` (or, with ``None``, continues the RNG streams).
        """
        self._check_open()
        if seed is None and not self._has_reset:
            seed = self._initial_seed
        obs = self._reset(None if seed is None else int(seed))
        self._has_reset = True
        # float64 sums: long episodes of float32 rewards would lose precision.
        self._ep_return = torch.zeros(self.num_envs, dtype=torch.float64, device=self.device)
        self._ep_length = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        return obs

    def step(self, action: torch.Tensor) -> StepResult:
        """Advance every sub-env one agent step, autoresetting finished ones in the same call."""
        self._check_open()
        if not self._has_reset:
            raise RuntimeError("call reset() before step()")
        out = self._step(self._check_action(action))
        if self.device.type == "cpu":
            reward, ep_return, ep_length = self._episode_stats_host(out)
        else:
            reward, ep_return, ep_length = self._episode_stats_device(out)
        final = out.final_obs
        if final is None:
            final = {key: value.clone() for key, value in out.obs.items()}
        info: dict[str, Any] = {"final_obs": final, "episode_return": ep_return, "episode_length": ep_length}
        if out.info:
            info.update(out.info)
        return out.obs, reward, out.terminated, out.truncated, info

    def _episode_stats_device(self, out: BackendStep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``step``'s bookkeeping: float32 reward, then ``episode_return`` and ``episode_length`` of the
        episodes that just ended (0 elsewhere). Masked tensor ops only, so no host sync on a GPU."""
        reward, done = out.reward, out.terminated | out.truncated
        self._ep_return += reward
        self._ep_length += 1
        ep_return = torch.where(done, self._ep_return, 0.0).to(torch.float32)
        ep_length = torch.where(done, self._ep_length, 0).to(torch.float32)
        self._ep_return.masked_fill_(done, 0.0)
        self._ep_length.masked_fill_(done, 0)
        return reward.to(torch.float32), ep_return, ep_length

    def _episode_stats_host(self, out: BackendStep) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``_episode_stats_device`` on the host, in numpy views of the tensors (zero-copy): next to a
        simulator step each torch op on a tiny tensor costs microseconds of dispatch, numpy's a fraction."""
        reward = out.reward.numpy()
        done = out.terminated.numpy() | out.truncated.numpy()
        ep_return_sum, ep_length_sum = self._ep_return.numpy(), self._ep_length.numpy()
        ep_return_sum += reward
        ep_length_sum += 1
        ep_return = np.zeros(self.num_envs, dtype=np.float32)
        ep_length = np.zeros(self.num_envs, dtype=np.float32)
        if done.any():
            ep_return[done] = ep_return_sum[done]
            ep_length[done] = ep_length_sum[done]
            ep_return_sum[done] = 0.0
            ep_length_sum[done] = 0
        reward32 = reward.astype(np.float32, copy=False)
        return torch.from_numpy(reward32), torch.from_numpy(ep_return), torch.from_numpy(ep_length)

    def _reset(self, seed: int | None) -> Obs:
        """Backend: reset every sub-env (sub-env i seeded with ``seed + i`` unless ``seed`` is None)."""
        raise NotImplementedError(f"{type(self).__name__} must implement _reset (or override reset)")

    def _step(self, action: torch.Tensor) -> BackendStep:
        """Backend: one agent step with a checked action, autoresetting finished sub-envs.

        ``action`` is [N, action_dim] in [-1, 1], finite, on ``_action_device`` (default ``device``) with
        dtype ``_action_dtype``.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement _step (or override step)")

    def privileged_state(self) -> torch.Tensor:
        """The simulator's full task state behind the current observation, float32 [N, D] on ``device``.

        Not part of the contract's observation, and never to be given to a learner: it exists so that a
        *privileged* scripted expert can act in a task whose observation hides the scene's state (``arm:...-pixels``:
        proprioception and cameras only), the way SERL / HIL-SERL demonstrations come from an operator who sees the
        scene. ``robot-rl collect policy=expert`` is its one user; what is recorded is still the observation.
        Row i belongs to the obs last returned for sub-env i (after an autoreset: its new episode's first state).
        Backends without such a state raise ``NotImplementedError``.
        """
        raise NotImplementedError(f"{self.spec}: this env exposes no privileged state (only arm: envs do)")

    def reflection(self) -> Reflection | None:
        """The task's mirror symmetry, if it declares one (``data.mirror=true`` and ``train.mirror_online=true`` then
        also learn from the prior and online data's reflections; ``arm:push`` and ``arm:pick_place`` declare
        y -> -y). None (the default): no symmetry declared."""
        return None

    @abc.abstractmethod
    def render(self, index: int = 0) -> np.ndarray:
        """Return an RGB uint8 frame (H, W, 3) of sub-env ``index``."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release simulator and rendering resources; safe to call twice."""

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(spec={self.spec!r}, num_envs={self.num_envs}, device={self.device})"

    # Shared state; implementations set ``_closed``, ``_render`` and ``_initial_seed`` (the seed given to make),
    # and may set where ``_step`` wants its actions (None = ``device``) and in which float dtype.
    _closed: bool = False
    _render: bool = False
    _initial_seed: int | None = None
    _has_reset: bool = False
    _action_device: torch.device | None = None
    _action_dtype: torch.dtype = torch.float32
    _ep_return: torch.Tensor
    _ep_length: torch.Tensor

    def _check_action(self, action: torch.Tensor) -> torch.Tensor:
        """Shape/dtype/finiteness checks and clipping to [-1, 1], on ``_action_device`` in ``_action_dtype``.

        The action moves to where the backend wants it once, then is checked there. Finiteness is checked
        before any narrowing, so a huge float64 value is clipped rather than mistaken for inf (clipping and
        rounding commute, +-1 being exact in every float dtype). On the host the checks run in numpy: on tiny
        tensors its ufuncs cost a fraction of torch's per-op dispatch, which matters at small batch sizes. On a
        GPU ``bool(...)`` is the step's one host sync: a NaN must raise before it reaches the simulator.
        """
        if not isinstance(action, torch.Tensor):
            action = torch.as_tensor(action)
        expected = (self.num_envs, self.action_dim)
        if action.shape != expected:
            raise ValueError(f"action must have shape {expected}, got {tuple(action.shape)}")
        if not action.is_floating_point():
            raise TypeError(f"action must be a floating point tensor, got {action.dtype}")
        a = action.detach()
        device = self._action_device or self.device
        if a.device != device:
            a = a.to(device)
        dtype = self._action_dtype
        if a.device.type == "cpu" and dtype in _NUMPY_FLOATS:
            if a.dtype != torch.float32 and a.dtype != torch.float64:
                a = a.to(torch.float32)  # float16/bfloat16 widen exactly
            x = a.numpy()
            finite = np.isfinite(x)
            if not finite.all():
                _refuse(np.flatnonzero(~finite.all(axis=1)).tolist())
            x = np.minimum(np.maximum(x, -1.0), 1.0)
            return torch.from_numpy(x.astype(_NUMPY_FLOATS[dtype], copy=False))
        finite = torch.isfinite(a).all(dim=1)
        if not bool(finite.all()):
            _refuse(torch.nonzero(~finite).flatten().tolist())
        return a.clamp(-1.0, 1.0).to(dtype)

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{self.spec} env is closed")

    def _check_render(self, index: int) -> None:
        self._check_open()
        if not self._render:
            raise RuntimeError(f"{self.spec} was made without rendering; pass render=True to envs.make")
        if not 0 <= index < self.num_envs:
            raise IndexError(f"render index {index} out of range for num_envs={self.num_envs}")


class SyncBatchedEnv(BatchedEnv):
    """``BatchedEnv`` over a list of single gymnasium envs stepped one after another in this process.

    The sub-envs must have a flat float32 Box observation space (batched as ``obs["state"]``) or a ``Dict`` of
    Boxes with a flat float32 ``"state"`` and further float32 / uint8 groups such as ``"pixels"`` (H, W, 3),
    each batched under its own key (``final_obs`` likewise), and a Box(-1, 1) action space (what
    ``robot_rl.envs.make_single`` builds). Finished sub-envs are reset with ``seed=None`` so that a seeded run stays
    reproducible across autoresets. The sub-envs run on the host, so actions are checked there
    (``_action_device``) and moved once for the whole batch.
    """

    _action_device = torch.device("cpu")

    def __init__(
        self,
        spec: str,
        envs: Sequence[gym.Env],
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        max_episode_steps: int | None = None,
        render: bool = False,
        can_terminate: bool | None = None,
    ) -> None:
        if len(envs) < 1:
            raise ValueError("SyncBatchedEnv needs at least one sub-env")
        first = envs[0]
        obs_space, act_space = first.observation_space, first.action_space
        # Flat float32 Box (the common case) -> {"state": ...}; a Dict of Boxes (e.g. state + pixels) keeps its
        # groups, each stacked on its own.
        self._groups: tuple[str, ...] | None = None
        if isinstance(obs_space, gym.spaces.Dict):
            self._groups = _check_dict_space(obs_space)
        elif not (
            isinstance(obs_space, gym.spaces.Box)
            and obs_space.dtype == np.float32
            and len(obs_space.shape) == 1
        ):
            raise ValueError(
                "sub-envs need a flat float32 Box observation space or a Dict of Boxes with a flat float32 "
                f"'state', got {obs_space}"
            )
        if not (
            isinstance(act_space, gym.spaces.Box)
            and len(act_space.shape) == 1
            and np.all(act_space.low == -1.0)
            and np.all(act_space.high == 1.0)
        ):
            raise ValueError(f"sub-envs need a flat Box(-1, 1) action space, got {act_space}")
        for env in envs[1:]:
            if _space_shapes(env.observation_space) != _space_shapes(obs_space) or (
                env.action_space.shape != act_space.shape
            ):
                raise ValueError("all sub-envs must have the same observation and action shapes")

        self._envs = list(envs)
        self.num_envs = len(self._envs)
        self.device = torch.device(device)
        self.spec = spec
        if self._groups is None:
            self.observation_spec = {"state": (tuple(obs_space.shape), torch.float32)}
        else:
            self.observation_spec = {
                key: (tuple(obs_space[key].shape), _TORCH_DTYPES[np.dtype(obs_space[key].dtype)])
                for key in self._groups
            }
        self.action_dim = int(act_space.shape[0])
        self.max_episode_steps = max_episode_steps
        self.single_observation_space = obs_space
        self.single_action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), np.float32)
        self.control_dt = _agent_step_seconds(first)
        # The backend's answer where it has one (gymnasium's own tasks), else the env's own attribute, else True.
        self.can_terminate = (bool(getattr(first.unwrapped, "can_terminate", True)) if can_terminate is None
                              else can_terminate)
        self._render = render
        self._initial_seed = seed

    def _reset(self, seed: int | None) -> Obs:
        rows = []
        for i, env in enumerate(self._envs):
            sub_seed = None if seed is None else seed + i
            obs, _ = env.reset(seed=sub_seed)
            if sub_seed is not None:
                env.action_space.seed(sub_seed)
            rows.append(obs)
        return self._batch_obs(rows)

    def _step(self, action: torch.Tensor) -> BackendStep:
        actions = action.numpy()
        n = self.num_envs
        rewards = np.empty(n, dtype=np.float64)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        success: np.ndarray | None = None
        human: np.ndarray | None = None
        reset_steps: np.ndarray | None = None
        final_rows: dict[int, Any] = {}
        rows = []
        for i, env in enumerate(self._envs):
            obs, reward, term, trunc, info = env.step(actions[i])
            rewards[i] = float(reward)
            terminated[i] = term
            truncated[i] = trunc
            flag = _success_flag(info)
            if flag is not None:
                if success is None:
                    success = np.zeros(n, dtype=bool)
                success[i] = flag
            if term or trunc:
                final_rows[i] = obs
                obs, reset_info = env.reset()
                if reset_info.get("human_reset"):  # autonomous practice: a scene a person had to put back
                    human = np.zeros(n, dtype=bool) if human is None else human
                    human[i] = True
                if reset_info.get("reset_steps"):  # practice's reset controller: robot time between episodes
                    reset_steps = np.zeros(n, dtype=np.int64) if reset_steps is None else reset_steps
                    reset_steps[i] = reset_info["reset_steps"]
            rows.append(obs)

        obs_out = self._batch_obs(rows)
        final_out = None
        if final_rows:
            final_out = self._batch_obs([final_rows.get(i, row) for i, row in enumerate(rows)])
        to_torch = self._to_torch
        info = None if success is None else {"success": to_torch(success)}
        if human is not None:
            info = {**(info or {}), "human_reset": to_torch(human)}
        if reset_steps is not None:
            info = {**(info or {}), "reset_steps": to_torch(reset_steps)}
        return BackendStep(
            obs_out, to_torch(rewards), to_torch(terminated), to_torch(truncated), final_out, info
        )

    def privileged_state(self) -> torch.Tensor:
        """``BatchedEnv.privileged_state``: each sub-env's ``unwrapped.privileged_state()`` (``ArmEnv`` has one)."""
        self._check_open()
        getters = [getattr(env.unwrapped, "privileged_state", None) for env in self._envs]
        if any(fn is None for fn in getters):
            return super().privileged_state()
        if not self._has_reset:
            raise RuntimeError("call reset() before privileged_state()")
        return self._to_torch(np.stack([np.asarray(fn(), dtype=np.float32) for fn in getters]))

    def reflection(self) -> Reflection | None:
        """``BatchedEnv.reflection``: the sub-envs' ``unwrapped.reflection()`` (``ArmEnv`` has one), else None."""
        getter = getattr(self._envs[0].unwrapped, "reflection", None)
        signs = getter() if getter is not None else None
        return None if signs is None else Reflection.from_signs(*signs)

    def reset_envs(self, mask: torch.Tensor) -> Obs:
        """Start a new episode in the sub-envs where ``mask`` (bool [N]) is True, as autoreset does (``seed=None``),
        for a wrapper that ends episodes the sub-envs did not end themselves (``robot_rl.classifier_reward``).
        Returns those sub-envs' first observations, rows in index order; their episode statistics restart."""
        self._check_open()
        if not self._has_reset:
            raise RuntimeError("call reset() before reset_envs()")
        index = torch.nonzero(torch.as_tensor(mask).cpu()).flatten().tolist()
        rows = [self._envs[i].reset()[0] for i in index]
        self._ep_return[index] = 0.0
        self._ep_length[index] = 0
        return self._batch_obs(rows)

    def render(self, index: int = 0) -> np.ndarray:
        """Frame of one sub-env; only available when the env was made with ``render=True``."""
        self._check_render(index)
        frame = self._envs[index].render()
        if frame is None:
            raise RuntimeError(f"sub-env {index} of {self.spec} returned no frame")
        return np.ascontiguousarray(frame, dtype=np.uint8)

    def close(self) -> None:
        """Close all sub-envs (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for env in self._envs:
            env.close()

    def _batch_obs(self, rows: list[Any]) -> Obs:
        """Stack per-env observations (flat arrays, or dicts of arrays) into the batched obs dict."""
        if self._groups is None:
            return {"state": self._to_torch(np.stack(rows))}
        return {key: self._to_torch(np.stack([row[key] for row in rows])) for key in self._groups}

    def _to_torch(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)


_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.uint8): torch.uint8}
_NUMPY_FLOATS = {torch.float32: np.float32, torch.float64: np.float64}


def _check_dict_space(space: gym.spaces.Dict) -> tuple[str, ...]:
    """Validate a Dict observation space for batching; returns its group names ("state" first)."""
    state = space.spaces.get("state")
    if not (isinstance(state, gym.spaces.Box) and state.dtype == np.float32 and len(state.shape) == 1):
        raise ValueError(f"a Dict observation space needs a flat float32 Box 'state' group, got {space}")
    for key, sub in space.spaces.items():
        if not isinstance(sub, gym.spaces.Box) or np.dtype(sub.dtype) not in _TORCH_DTYPES:
            raise ValueError(f"observation group {key!r} must be a float32 or uint8 Box, got {sub}")
    return ("state", *(key for key in space.spaces if key != "state"))


def _agent_step_seconds(env: gym.Env) -> float | None:
    """Simulated seconds per step of a wrapped gymnasium env: the base env's ``dt`` (gymnasium's MuJoCo and
    classic-control envs, the dm_control adapter) or ``control_dt`` (the arm), times the action repeat."""
    base = env.unwrapped
    dt = getattr(base, "control_dt", None) or getattr(base, "dt", None)
    if not isinstance(dt, (int, float)) or dt <= 0:
        return None
    repeat, layer = 1, env
    while isinstance(layer, gym.Wrapper):  # `repeat`: wrappers.ActionRepeat's (core cannot import wrappers)
        repeat *= int(getattr(layer, "repeat", 1))
        layer = layer.env
    return float(dt) * repeat


def _refuse(bad: list[int]) -> None:
    raise ValueError(f"action contains NaN or inf for sub-env(s) {bad}; refusing to send it to the simulator")


def _space_shapes(space: gym.spaces.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: sub.shape for key, sub in space.spaces.items()}
    return space.shape


def _success_flag(info: dict[str, Any]) -> bool | None:
    for key in _SUCCESS_KEYS:
        if key in info:
            return bool(info[key])
    return None
