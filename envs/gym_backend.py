"""gymnasium backend: ``gym:<id>`` specs, e.g. ``gym:Hopper-v5`` or ``gym:Pendulum-v1``."""

from __future__ import annotations

import difflib
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from .core import EnvOptions, UnknownEnvError
from .wrappers import finish_single_env

PREFIX = "gym:"


def lookup(env_id: str) -> EnvSpec:
    """Return the registered spec of ``env_id`` or raise ``UnknownEnvError`` listing close matches."""
    if env_id in gym.registry:
        return gym.registry[env_id]
    ids = sorted(gym.registry)
    by_lower = {i.lower(): i for i in ids}
    close = [by_lower[m] for m in difflib.get_close_matches(env_id.lower(), list(by_lower), n=5, cutoff=0.6)]
    if close:
        hint = "close matches: " + ", ".join(PREFIX + c for c in close)
    else:
        hint = "valid choices: " + ", ".join(PREFIX + i for i in ids)
    raise UnknownEnvError(f"unknown env spec {PREFIX + env_id!r}: no such gymnasium id; {hint}")


def _is_mujoco(env_spec: EnvSpec) -> bool:
    entry = env_spec.entry_point
    return isinstance(entry, str) and entry.startswith("gymnasium.envs.mujoco")


def make_env(env_id: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """Build one normalised gymnasium env; returns it and its time limit in agent steps.

    The registered TimeLimit is left out of ``gym.make`` and re-applied outside action repeat, so that the
    limit counts agent steps.
    """
    env_spec = lookup(env_id)
    mujoco = _is_mujoco(env_spec)
    kwargs: dict[str, Any] = {}
    if options.render:
        kwargs["render_mode"] = "rgb_array"
        if mujoco:
            kwargs["height"], kwargs["width"] = options.render_size
    if options.camera_id is not None:
        if not mujoco:
            raise ValueError(f"camera_id is only supported for MuJoCo gymnasium envs, not {PREFIX + env_id}")
        kwargs["camera_id"] = options.camera_id
    env = gym.make(env_id, max_episode_steps=-1, disable_env_checker=True, **kwargs)
    if not isinstance(env.action_space, gym.spaces.Box):
        env.close()
        raise ValueError(
            f"{PREFIX + env_id} has a {type(env.action_space).__name__} action space; "
            "only continuous (Box) action spaces are supported"
        )
    try:
        return finish_single_env(env, options, env_spec.max_episode_steps)
    except Exception:
        env.close()
        raise
