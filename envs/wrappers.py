"""Small gymnasium wrappers that give every backend the same single-env interface.

The batched env relies on flat float32 observations and actions in [-1, 1]; time limits count agent steps
after action repeat. ``finish_single_env`` applies these in the one order that makes that true.
"""

from __future__ import annotations

import math
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np

from .core import EnvOptions


class Float32Observation(gym.ObservationWrapper, gym.utils.RecordConstructorArgs):
    """Observations in the batched layout: a flat float32 vector, or a dict of groups.

    A flat Box is cast to float32 (torch's default dtype, half the memory of float64 in replay buffers). A Dict
    (a third-party env's, e.g. ``agent_pos`` + ``environment_state`` + a camera) is mapped onto groups:
    ``"state"``: its vector entries (scalar or 1-D Boxes of any numeric dtype) concatenated as float32, a
    ``"state"`` entry first, then the others in sorted key order, nested Dicts depth first with ``a/b`` keys
    (``state_keys`` records the order);
    ``"pixels"``: its image entry (uint8, H x W x C) when there is one, or ``"pixels/<key>"`` for each of
    several. Any other entry is refused with its key named.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ObservationWrapper.__init__(self, env)
        space = env.observation_space
        self.state_keys: tuple[str, ...] = ()
        self.image_keys: dict[str, str] = {}  # group name -> the env's key
        if isinstance(space, gym.spaces.Dict):
            self.observation_space = self._map_dict(space)
            return
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(
                f"only flat Box observation spaces or Dicts of vectors and images are supported, got {space}"
            )
        self.observation_space = gym.spaces.Box(
            space.low.astype(np.float32), space.high.astype(np.float32), space.shape, np.float32
        )

    def _map_dict(self, space: gym.spaces.Dict) -> gym.spaces.Dict:
        vectors, images = [], []
        for path, sub in _leaves(space):
            key = "/".join(path)
            if isinstance(sub, gym.spaces.Box) and len(sub.shape) <= 1 and np.issubdtype(sub.dtype, np.number):
                vectors.append((key, path, sub))
            elif isinstance(sub, gym.spaces.Box) and len(sub.shape) == 3 and sub.dtype == np.uint8:
                images.append((key, path, sub))
            else:
                raise ValueError(
                    f"observation entry {key!r} is {sub}; supported are numeric vectors (joined into 'state') and "
                    f"uint8 H x W x C images (as 'pixels'), also inside nested Dicts"
                )
        if not vectors:
            raise ValueError(f"a Dict observation needs at least one vector entry for 'state', got {space}")
        self.state_keys = tuple(key for key, _, _ in vectors)
        self._state_paths = [path for _, path, _ in vectors]
        low = np.concatenate([np.ravel(sub.low).astype(np.float32) for _, _, sub in vectors])
        high = np.concatenate([np.ravel(sub.high).astype(np.float32) for _, _, sub in vectors])
        groups: dict[str, gym.spaces.Space] = {"state": gym.spaces.Box(low, high, low.shape, np.float32)}
        self._image_paths: dict[str, tuple[str, ...]] = {}
        for key, path, sub in images:
            name = "pixels" if len(images) == 1 else f"pixels/{key}"
            self.image_keys[name] = key
            self._image_paths[name] = path
            groups[name] = sub
        return gym.spaces.Dict(groups)

    def observation(self, observation: Any) -> Any:
        if not self.state_keys:
            return np.asarray(observation, dtype=np.float32)
        state = np.concatenate([np.ravel(np.asarray(_at(observation, p), dtype=np.float32)) for p in self._state_paths])
        return {"state": state, **{name: _at(observation, path) for name, path in self._image_paths.items()}}


def _leaves(space: gym.spaces.Dict, prefix: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], gym.spaces.Space]]:
    """The non-Dict entries of a (nested) Dict space with their key paths: a ``"state"`` entry first, then the others
    in sorted key order, depth first (goal-conditioned envs nest ``observation`` / ``achieved_goal`` /
    ``desired_goal``, robot suites a robot's and an object's entries)."""
    out = []
    for key in sorted(space.spaces, key=lambda k: (k != "state", k)):
        sub = space.spaces[key]
        out += _leaves(sub, (*prefix, key)) if isinstance(sub, gym.spaces.Dict) else [((*prefix, key), sub)]
    return out


def _at(observation: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        observation = observation[key]
    return observation


class NormalizedAction(gym.ActionWrapper, gym.utils.RecordConstructorArgs):
    """Expose actions in [-1, 1] and map them affinely to the actuator range.

    Policies then need no knowledge of each task's actuator limits. Out-of-range values are clipped (a
    squashed or noisy policy may overshoot slightly); non-finite values raise instead, because a NaN that
    reaches MuJoCo silently corrupts the simulation state.
    """

    def __init__(self, env: gym.Env) -> None:
        gym.utils.RecordConstructorArgs.__init__(self)
        gym.ActionWrapper.__init__(self, env)
        space = env.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"only flat continuous Box action spaces are supported, got {space}")
        low, high = space.low.astype(np.float64), space.high.astype(np.float64)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            raise ValueError(f"cannot normalise an action space with infinite bounds: {space}")
        self._low, self._high = low, high
        self._center = (high + low) / 2.0
        self._half_range = (high - low) / 2.0
        self._dtype = space.dtype
        self.action_space = gym.spaces.Box(-1.0, 1.0, space.shape, np.float32)

    def action(self, action: Any) -> np.ndarray:
        # Inside a BatchedEnv (SyncBatchedEnv) actions were already checked by BatchedEnv.step; these checks
        # stay for the single gymnasium env of ``envs.make_single``, which tools step directly with no
        # BatchedEnv in front of it.
        a = np.asarray(action, dtype=np.float64)
        if a.shape != self.action_space.shape:
            raise ValueError(f"action must have shape {self.action_space.shape}, got {a.shape}")
        if not np.all(np.isfinite(a)):
            raise ValueError(f"action contains NaN or inf ({a}); refusing to send it to the simulator")
        a = np.clip(a, -1.0, 1.0)
        return np.clip(self._center + a * self._half_range, self._low, self._high).astype(self._dtype)


class ActionRepeat(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Repeat each action ``repeat`` times, summing rewards and stopping early when the episode ends."""

    def __init__(self, env: gym.Env, repeat: int) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, repeat=repeat)
        gym.Wrapper.__init__(self, env)
        if repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {repeat}")
        self._repeat = self.repeat = repeat

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        total = 0.0
        for _ in range(self._repeat):
            obs, reward, terminated, truncated, info = self.env.step(action)
            total += float(reward)
            if terminated or truncated:
                break
        return obs, total, terminated, truncated, info


class ResizeRender(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Make ``render()`` return frames of exactly (height, width), for backends that cannot render to size; an env
    whose ``render()`` returns several images (a list, a dict of cameras, a stack) gets them side by side.

    Nearest-neighbour resampling is enough for videos and avoids an image-library dependency. It is a no-op
    when the backend already renders at the requested size.
    """

    def __init__(self, env: gym.Env, size: tuple[int, int]) -> None:
        gym.utils.RecordConstructorArgs.__init__(self, size=size)
        gym.Wrapper.__init__(self, env)
        self._size = size

    def render(self) -> Any:
        frame = self.env.render()
        if frame is None:
            return None
        height, width = self._size
        views = _views(frame)
        if len(views) == 1:
            return _resize(views[0], height, width)
        # Several images (cameras): side by side in one frame of the requested size, each of an equal share.
        shares = np.diff(np.linspace(0, width, len(views) + 1).astype(int))
        return np.concatenate([_resize(view, height, int(w)) for view, w in zip(views, shares, strict=True)], axis=1)


def _views(frame: Any) -> list[np.ndarray]:
    """The images of a ``render()`` result: one H x W x C frame, or several (a list or tuple, a dict of camera
    name to frame, or an N x H x W x C stack), each as H x W x 3 uint8."""
    if isinstance(frame, dict):
        parts = [frame[key] for key in sorted(frame)]
    elif isinstance(frame, (list, tuple)):
        parts = list(frame)
    else:
        array = np.asarray(frame)
        parts = list(array) if array.ndim == 4 else [array]
    views = []
    for part in parts:
        image = np.asarray(part)
        if image.ndim == 2:
            image = np.repeat(image[..., None], 3, axis=2)
        if image.ndim != 3 or image.shape[2] not in (1, 3, 4):
            raise ValueError(f"render() returned an image of shape {image.shape}; expected H x W x 3 frames")
        if image.shape[2] == 1:
            image = np.repeat(image, 3, axis=2)
        views.append(np.ascontiguousarray(image[..., :3]))
    if not views:
        raise ValueError("render() returned no image")
    return views


def _resize(frame: np.ndarray, height: int, width: int) -> np.ndarray:
    if frame.shape[:2] == (height, width):
        return frame
    rows = np.arange(height) * frame.shape[0] // height
    cols = np.arange(width) * frame.shape[1] // width
    return frame[rows[:, None], cols[None, :]]


def default_time_limit(task_limit: int | None, action_repeat: int) -> int | None:
    """A task's own step limit expressed in agent steps, so the simulated episode duration is unchanged."""
    if task_limit is None:
        return None
    return math.ceil(task_limit / action_repeat)


def finish_single_env(
    env: gym.Env, options: EnvOptions, task_limit: int | None
) -> tuple[gym.Env, int | None]:
    """Wrap a raw backend env (without its own time limit) into the common single-env interface.

    ``task_limit`` is the task's default episode length in simulator/control steps. Returns the wrapped env
    and the time limit it enforces in agent steps (None = no limit).
    """
    env = Float32Observation(env)
    env = NormalizedAction(env)
    if options.action_repeat > 1:
        env = ActionRepeat(env, options.action_repeat)
    limit = options.max_episode_steps
    if limit is None:
        limit = default_time_limit(task_limit, options.action_repeat)
    if limit is not None:
        env = gym.wrappers.TimeLimit(env, int(limit))
    if options.render:
        env = ResizeRender(env, options.render_size)
    return env, limit
