"""Observation-to-action delay: the action computed from the observation of step t reaches the actuators at t + d.

On a robot the action for time t is computed from an observation of time t - d (camera, transport, inference). A
policy trained without that delay acts on a world that has already moved on; a *delay-aware* policy is trained
under it and sees what it cannot yet change. ``DelayedEnv`` adds the delay to any ``BatchedEnv``, once for every
backend (``envs.make(..., delay=ActionDelay(...))``; ``robot-rl train env_delay.steps=5``):

* ``step(a_t)`` commits ``a_t``; the env applies ``a_{t-d}``, the action committed d steps earlier. The first d
  steps of an episode apply the zero action (mid-range: the arm's hand stands still), as a robot holds until the
  first command arrives.
* ``d`` is fixed, or drawn per episode from a list (a measured distribution: each entry equally likely, so repeated
  values weigh more), in control steps or in milliseconds converted with the env's control rate
  (``BatchedEnv.control_dt``, rounded to the nearest step).
* ``aware=True`` (the delayed-MDP "augmented state"): the ``state`` group gets the ``D`` most recently committed
  actions appended (``D`` the largest delay; oldest first, zeros at an episode's start), i.e. the actions still in
  flight, which will be applied before the new one lands. A drawn delay also appends ``d / D``, so the policy
  knows how many of them are still in flight. With the state made Markov again the learner needs no change.

Deploying such a policy needs the same in-flight actions beside the robot's state: ``InFlightActions`` keeps them
for a client that sends actions (``robot-rl deploy``, ``robot-rl serve-policy``'s client).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from .core import BackendStep, BatchedEnv, Obs, Reflection


@dataclass(frozen=True)
class ActionDelay:
    """How long an action takes to land, in agent steps or milliseconds; set at most one of the four.

    ``name`` is how errors call the option (``env_delay`` for ``robot-rl train``'s keys).
    """

    steps: int = 0  # fixed delay in agent (control) steps
    ms: float | None = None  # fixed delay in milliseconds, converted with the env's control rate
    sample_steps: tuple[int, ...] = ()  # one drawn per episode (uniformly over the entries)
    sample_ms: tuple[float, ...] = ()  # the same in milliseconds (e.g. delays measured on the robot)
    aware: bool = False  # append the actions in flight (and a drawn delay) to the state observation
    name: str = field(default="delay", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sample_steps", tuple(self.sample_steps))
        object.__setattr__(self, "sample_ms", tuple(float(v) for v in self.sample_ms))
        n = self.name
        if isinstance(self.steps, bool) or not isinstance(self.steps, (int, np.integer)) or self.steps < 0:
            raise ValueError(f"{n}.steps must be an int >= 0, got {self.steps!r}")
        if self.ms is not None and not (math.isfinite(self.ms) and self.ms >= 0):
            raise ValueError(f"{n}.ms must be >= 0 or null, got {self.ms!r}")
        if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in self.sample_steps):
            raise ValueError(f"{n}.sample_steps must be a list of ints >= 0, got {list(self.sample_steps)}")
        if any(not (math.isfinite(v) and v >= 0) for v in self.sample_ms):
            raise ValueError(f"{n}.sample_ms must be a list of milliseconds >= 0, got {list(self.sample_ms)}")
        given = [k for k, set_ in (("steps", self.steps > 0), ("ms", self.ms is not None),
                                   ("sample_steps", bool(self.sample_steps)), ("sample_ms", bool(self.sample_ms)))
                 if set_]
        if len(given) > 1:
            raise ValueError(f"set one of {n}.steps, {n}.ms, {n}.sample_steps, {n}.sample_ms; got "
                             f"{', '.join(n + '.' + k for k in given)}")

    @property
    def enabled(self) -> bool:
        """Whether any delay is configured (``ms=0`` counts: it resolves to 0 steps, a no-op)."""
        return self.steps > 0 or self.ms is not None or bool(self.sample_steps) or bool(self.sample_ms)

    def choices(self, control_dt: float | None, spec: str = "the env") -> tuple[int, ...]:
        """The delays in agent steps an episode draws from (one entry: fixed); milliseconds are converted with
        ``control_dt`` (seconds per agent step) and rounded to the nearest step."""
        if self.sample_steps:
            return tuple(int(v) for v in self.sample_steps)
        if self.ms is None and not self.sample_ms:
            return (int(self.steps),)
        if not control_dt:
            key = f"{self.name}.ms" if self.ms is not None else f"{self.name}.sample_ms"
            raise ValueError(f"{key}: {spec} does not say its control rate; give the delay in steps "
                             f"({self.name}.steps or {self.name}.sample_steps)")
        values = (self.ms,) if self.ms is not None else self.sample_ms
        return tuple(int(round(v / 1000.0 / control_dt)) for v in values)

    def as_dict(self) -> dict[str, Any]:
        """The options as plain data (a run's metadata)."""
        out = asdict(self)
        out.pop("name")
        out["sample_steps"], out["sample_ms"] = list(self.sample_steps), list(self.sample_ms)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None, name: str = "delay") -> ActionDelay:
        """From ``as_dict``'s data or a config section (unknown keys are ignored: a newer run's extras)."""
        data = dict(data or {})
        known = {"steps", "ms", "sample_steps", "sample_ms", "aware"}
        return cls(**{k: v for k, v in data.items() if k in known and v is not None}, name=name)


def augmented_size(choices: Sequence[int], action_dim: int, aware: bool) -> int:
    """How many numbers a delay-aware env appends to ``state``: the ``max(choices)`` actions in flight, and the
    drawn delay when ``choices`` has more than one value; 0 when not aware or without delay."""
    most = max(choices)
    if not aware or most == 0:
        return 0
    return most * action_dim + int(len(set(choices)) > 1)


class DelayedEnv(BatchedEnv):
    """``env`` with the observation-to-action delay ``delay`` (module docstring). Observations, rewards,
    terminations and the info dict are the inner env's (``info["applied_action"]``: what reached the env this step,
    ``info["delay_steps"]``: each sub-env's delay), the ``state`` group extended when ``delay.aware``."""

    def __init__(self, env: BatchedEnv, delay: ActionDelay) -> None:
        self.env, self.delay = env, delay
        choices = delay.choices(env.control_dt, env.spec)
        self.choices = choices
        self.max_delay = max(choices)
        self.sampled = len(set(choices)) > 1
        self.extra = augmented_size(choices, env.action_dim, delay.aware)
        self.num_envs, self.device, self.spec = env.num_envs, env.device, env.spec
        self.action_dim, self.max_episode_steps = env.action_dim, env.max_episode_steps
        self.single_action_space, self.control_dt = env.single_action_space, env.control_dt
        self.can_terminate = env.can_terminate
        self._initial_seed = env._initial_seed  # the inner env applies it; our delay draws follow the same seed
        self.observation_spec = dict(env.observation_spec)
        self.single_observation_space = env.single_observation_space
        if self.extra:
            if "state" not in env.observation_spec:
                raise ValueError(f"{delay.name}.aware=true: {env.spec} has no 'state' group to append the actions "
                                 "in flight to")
            (dim,), dtype = env.observation_spec["state"]
            self.observation_spec["state"] = ((dim + self.extra,), dtype)
            self.single_observation_space = _widened(env.single_observation_space, self.extra)
        self._choices = torch.tensor(choices, dtype=torch.int64)
        self._rng = torch.Generator().manual_seed(0)
        n, most = self.num_envs, self.max_delay
        self._buffer = torch.zeros(n, most, self.action_dim, device=self.device)  # committed, oldest first
        self._delay = torch.full((n,), choices[0], dtype=torch.int64, device=self.device)

    def metadata(self) -> dict[str, Any]:
        """What a deployed policy must know of its training delay (a policy directory's ``delay`` entry): the
        options, the delays in steps drawn from (``choices``) and the control period they were counted in."""
        return {**self.delay.as_dict(), "choices": list(self.choices), "control_dt": self.control_dt}

    def _draw(self, n: int) -> torch.Tensor:
        if not self.sampled:
            return torch.full((n,), self.choices[0], dtype=torch.int64, device=self.device)
        index = torch.randint(len(self.choices), (n,), generator=self._rng)
        return self._choices[index].to(self.device)

    def _reset(self, seed: int | None) -> Obs:
        obs = self.env.reset(seed=seed)
        if seed is not None:  # delay draws reproducible from the reset seed, apart from the env's own streams
            self._rng.manual_seed(int(seed) + 7_919)
        self._buffer.zero_()
        self._delay = self._draw(self.num_envs)
        return self._augment(obs, self._buffer, self._delay)

    def _step(self, action: torch.Tensor) -> BackendStep:
        action = action.to(self.device, torch.float32)
        if self.max_delay == 0:
            applied = action
        else:
            full = torch.cat([self._buffer, action[:, None]], dim=1)  # [N, D + 1, A], the newest last
            # Sub-env i applies the action committed d_i steps ago: index D - d_i (D itself: no delay, the new one).
            applied = full[torch.arange(self.num_envs, device=self.device), self.max_delay - self._delay]
            self._buffer = full[:, 1:].contiguous()
        obs, reward, terminated, truncated, info = self.env.step(applied)
        delays = self._delay.clone()
        # The true last observation sees the actions that were still in flight when the episode ended.
        final = self._augment(info["final_obs"], self._buffer, self._delay)
        done = terminated | truncated
        if self.max_delay:
            self._buffer = torch.where(done[:, None, None].to(self.device), 0.0, self._buffer)
        if self.sampled:
            self._delay = torch.where(done.to(self.device), self._draw(self.num_envs), self._delay)
        extra = {k: v for k, v in info.items() if k not in ("final_obs", "episode_return", "episode_length")}
        extra["applied_action"], extra["delay_steps"] = applied, delays
        return BackendStep(self._augment(obs, self._buffer, self._delay), reward, terminated, truncated, final, extra)

    def _augment(self, obs: Obs, buffer: torch.Tensor, delay: torch.Tensor) -> Obs:
        if not self.extra:
            return obs
        state = obs["state"]
        parts = [state, buffer.reshape(self.num_envs, -1).to(state)]
        if self.sampled:
            parts.append((delay.to(state) / self.max_delay)[:, None])
        return {**obs, "state": torch.cat(parts, dim=1)}

    def reset_envs(self, mask: torch.Tensor) -> Obs:
        """``SyncBatchedEnv.reset_envs`` through the delay: those sub-envs' actions in flight are dropped."""
        reset = getattr(self.env, "reset_envs", None)
        if reset is None:
            raise NotImplementedError(f"{self.spec}: the inner env cannot reset single sub-envs")
        rows = reset(mask)
        index = torch.nonzero(torch.as_tensor(mask).cpu()).flatten().to(self.device)
        self._buffer[index] = 0.0
        if self.sampled:
            self._delay[index] = self._draw(len(index))
        if not self.extra:
            return rows
        state = rows["state"]
        parts = [state, self._buffer[index].reshape(len(index), -1).to(state)]
        if self.sampled:
            parts.append((self._delay[index].to(state) / self.max_delay)[:, None])
        return {**rows, "state": torch.cat(parts, dim=1)}

    def privileged_state(self) -> torch.Tensor:
        """The inner env's (a privileged expert acts on the scene, not on the actions in flight)."""
        return self.env.privileged_state()

    def reflection(self) -> Reflection | None:
        """The inner env's symmetry, the actions in flight mirrored as actions (the drawn delay is unchanged)."""
        inner = self.env.reflection()
        if inner is None or not self.extra:
            return inner
        tail = [inner.action.repeat(self.max_delay)] + ([torch.ones(1)] if self.sampled else [])
        return Reflection(torch.cat([inner.state, *tail]), inner.action, inner.cameras)

    def render(self, index: int = 0) -> np.ndarray:
        return self.env.render(index)

    def close(self) -> None:
        self._closed = True
        self.env.close()


def _widened(space: gym.spaces.Space, extra: int) -> gym.spaces.Space:
    """``space`` with ``extra`` numbers in [-1, 1] appended to its (flat or ``state``) Box."""
    box = space["state"] if isinstance(space, gym.spaces.Dict) else space
    low = np.concatenate([box.low, -np.ones(extra, np.float32)]).astype(np.float32)
    high = np.concatenate([box.high, np.ones(extra, np.float32)]).astype(np.float32)
    wide = gym.spaces.Box(low, high, low.shape, np.float32)
    if isinstance(space, gym.spaces.Dict):
        return gym.spaces.Dict({**space.spaces, "state": wide})
    return wide


class InFlightActions:
    """What a delay-aware policy reads beside the robot's state at deploy: the last ``max_delay`` actions sent
    (oldest first, zeros at an episode's start), and with a drawn delay the current delay over ``max_delay``.

    A client calls ``sent(action)`` after each action it commands (the operator's too; ``None`` for a held tick:
    the robot did not move, as for the zero action) and ``observe(state)`` to get the policy's input.
    """

    def __init__(self, delay: dict[str, Any], action_dim: int) -> None:
        choices = [int(v) for v in delay["choices"]]
        self.max_delay, self.sampled = max(choices), len(set(choices)) > 1
        self.trained = sorted(choices)[len(choices) // 2]  # the median delay trained under
        self.action_dim = action_dim
        self.extra = augmented_size(choices, action_dim, bool(delay.get("aware")))
        self._buffer = np.zeros((self.max_delay, action_dim), np.float32)
        self.delay = self.trained  # the drawn delay's stand-in: the trained median until a caller measures one

    def reset(self) -> None:
        """A new episode: nothing in flight."""
        self._buffer[:] = 0.0

    def sent(self, action: np.ndarray | None) -> None:
        if self.max_delay == 0:
            return
        self._buffer = np.roll(self._buffer, -1, axis=0)
        self._buffer[-1] = 0.0 if action is None else np.asarray(action, np.float32)

    def observe(self, state: np.ndarray) -> np.ndarray:
        """``state`` with the actions in flight appended (``state`` unchanged when the policy is not aware)."""
        if not self.extra:
            return np.asarray(state, np.float32)
        parts = [np.asarray(state, np.float32), self._buffer.reshape(-1)]
        if self.sampled:
            parts.append(np.array([min(self.delay, self.max_delay) / self.max_delay], np.float32))
        return np.concatenate(parts)
