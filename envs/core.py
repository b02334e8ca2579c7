"""The batched-environment contract and its synchronous implementation.

Every backend (gymnasium, dm_control, ...) is reduced to a list of single gymnasium envs with flat float32
observations and actions normalised to [-1, 1] (see ``robot_rl.envs.wrappers``). ``SyncBatchedEnv`` steps such a list
in one Python loop and speaks torch to the learner. We deliberately do not use gymnasium's vector envs: the
async one is slower on few cores, and the sync one's autoreset happens on the *next* step, which would make
every learner deal with a dead transition. Here a finished sub-env is reset inside the same ``step`` and its
true last observation is handed back in ``info["final_obs"]`` so truncated episodes can be bootstrapped.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import gymnasium as gym
import numpy as np
import torch

Obs = dict[str, torch.Tensor]
StepResult = tuple[Obs, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]

_SUCCESS_KEYS = ("success", "is_success")


class UnknownEnvError(ValueError):
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
    """

    num_envs: int
    device: torch.device
    spec: str
    observation_spec: dict[str, tuple[tuple[int, ...], torch.dtype]]
    action_dim: int
    max_episode_steps: int | None
    single_observation_space: gym.spaces.Space
    single_action_space: gym.spaces.Box

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> Obs:
        """Reset every sub-env and return the batched first observation."""

    @abc.abstractmethod
    def step(self, action: torch.Tensor) -> StepResult:
        """Advance every sub-env one agent step, autoresetting finished ones in the same call."""

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

    # Shared checks; implementations set ``_closed`` and ``_render``.
    _closed: bool = False
    _render: bool = False

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
    reproducible across autoresets.
    """

    def __init__(
        self,
        spec: str,
        envs: Sequence[gym.Env],
        *,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        max_episode_steps: int | None = None,
        render: bool = False,
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
        self._render = render
        self._initial_seed = seed
        self._has_reset = False
        self._closed = False
        self._ep_return = np.zeros(self.num_envs, dtype=np.float64)
        self._ep_length = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self, seed: int | None = None) -> Obs:
        """Reset all sub-envs; the seed given to ``make`` applies to the first reset that has none."""
        self._check_open()
        if seed is None and not self._has_reset:
            seed = self._initial_seed
        rows = []
        for i, env in enumerate(self._envs):
            sub_seed = None if seed is None else int(seed) + i
            obs, _ = env.reset(seed=sub_seed)
            if sub_seed is not None:
                env.action_space.seed(sub_seed)
            rows.append(obs)
        self._has_reset = True
        self._ep_return[:] = 0.0
        self._ep_length[:] = 0
        return self._batch_obs(rows)

    def step(self, action: torch.Tensor) -> StepResult:
        """Step all sub-envs with one action row each; see the class and ``BatchedEnv`` docs for semantics."""
        self._check_open()
        if not self._has_reset:
            raise RuntimeError("call reset() before step()")
        actions = self._check_action(action)

        n = self.num_envs
        rewards = np.empty(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        ep_return = np.zeros(n, dtype=np.float32)
        ep_length = np.zeros(n, dtype=np.float32)
        success: np.ndarray | None = None
        final_rows: dict[int, Any] = {}
        rows = []
        for i, env in enumerate(self._envs):
            obs, reward, term, trunc, info = env.step(actions[i])
            rewards[i] = reward
            terminated[i] = term
            truncated[i] = trunc
            self._ep_return[i] += float(reward)
            self._ep_length[i] += 1
            flag = _success_flag(info)
            if flag is not None:
                if success is None:
                    success = np.zeros(n, dtype=bool)
                success[i] = flag
            if term or trunc:
                ep_return[i] = self._ep_return[i]
                ep_length[i] = self._ep_length[i]
                self._ep_return[i] = 0.0
                self._ep_length[i] = 0
                final_rows[i] = obs
                obs, _ = env.reset()
            rows.append(obs)

        obs_out = self._batch_obs(rows)
        if final_rows:
            final_out = self._batch_obs([final_rows.get(i, row) for i, row in enumerate(rows)])
        else:
            final_out = {key: value.clone() for key, value in obs_out.items()}
        out_info: dict[str, Any] = {
            "final_obs": final_out,
            "episode_return": self._to_torch(ep_return),
            "episode_length": self._to_torch(ep_length),
        }
        if success is not None:
            out_info["success"] = self._to_torch(success)
        return (
            obs_out,
            self._to_torch(rewards),
            self._to_torch(terminated),
            self._to_torch(truncated),
            out_info,
        )

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

    def _check_action(self, action: torch.Tensor) -> np.ndarray:
        """Validate on the caller's device, then move to CPU numpy once for the whole batch."""
        if not isinstance(action, torch.Tensor):
            action = torch.as_tensor(action)
        expected = (self.num_envs, self.action_dim)
        if tuple(action.shape) != expected:
            raise ValueError(f"action must have shape {expected}, got {tuple(action.shape)}")
        if not action.is_floating_point():
            raise TypeError(f"action must be a floating point tensor, got {action.dtype}")
        finite = torch.isfinite(action).all(dim=1)
        if not bool(finite.all()):
            bad = torch.nonzero(~finite).flatten().tolist()
            raise ValueError(
                f"action contains NaN or inf for sub-env(s) {bad}; refusing to send it to the simulator"
            )
        return action.detach().clamp(-1.0, 1.0).to(device="cpu", dtype=torch.float32).numpy()

    def _batch_obs(self, rows: list[Any]) -> Obs:
        """Stack per-env observations (flat arrays, or dicts of arrays) into the batched obs dict."""
        if self._groups is None:
            return {"state": self._to_torch(np.stack(rows))}
        return {key: self._to_torch(np.stack([row[key] for row in rows])) for key in self._groups}

    def _to_torch(self, array: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(array).to(self.device)


_TORCH_DTYPES = {np.dtype(np.float32): torch.float32, np.dtype(np.uint8): torch.uint8}


def _check_dict_space(space: gym.spaces.Dict) -> tuple[str, ...]:
    """Validate a Dict observation space for batching; returns its group names ("state" first)."""
    state = space.spaces.get("state")
    if not (isinstance(state, gym.spaces.Box) and state.dtype == np.float32 and len(state.shape) == 1):
        raise ValueError(f"a Dict observation space needs a flat float32 Box 'state' group, got {space}")
    for key, sub in space.spaces.items():
        if not isinstance(sub, gym.spaces.Box) or np.dtype(sub.dtype) not in _TORCH_DTYPES:
            raise ValueError(f"observation group {key!r} must be a float32 or uint8 Box, got {sub}")
    return ("state", *(key for key in space.spaces if key != "state"))


def _space_shapes(space: gym.spaces.Space) -> Any:
    if isinstance(space, gym.spaces.Dict):
        return {key: sub.shape for key, sub in space.spaces.items()}
    return space.shape


def _success_flag(info: dict[str, Any]) -> bool | None:
    for key in _SUCCESS_KEYS:
        if key in info:
            return bool(info[key])
    return None
