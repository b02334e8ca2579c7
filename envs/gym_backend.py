"""gymnasium backend: ``gym:<id>`` specs, e.g. ``gym:Hopper-v5`` or ``gym:Pendulum-v1``.

An environment that a third-party package registers when it is imported (a robot suite, a lab's own env) is
``gym:<module>:<id>``, gymnasium's own syntax: the module is imported first, then ``<id>`` is looked up.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import EnvSpec

from .core import EnvOptions, UnknownEnvError
from .wrappers import finish_single_env

PREFIX = "gym:"


def lookup(env_id: str) -> EnvSpec:
    """The registered spec of ``env_id`` (``[<module>:]<id>``, the module imported first) or an
    ``UnknownEnvError`` naming the closest registered ids."""
    module, _, name = env_id.rpartition(":")
    if module:
        _import_from_working_folder(module, name, env_id)
    if name in gym.registry:
        return gym.registry[name]
    by_lower = {i.lower(): i for i in gym.registry}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=5, cutoff=0.6)]
    where = f"after importing {module!r}" if module else "in gymnasium's registry"
    if close:
        hint = "closest: " + ", ".join(PREFIX + (f"{module}:" if module else "") + c for c in close)
    else:
        hint = (f"no close match among {len(by_lower)} ids" + ("" if module else
                "; an env that a package registers on import is gym:<module>:<id>"))
    raise UnknownEnvError(f"unknown env spec {PREFIX + env_id!r}: {name!r} is not registered {where}; {hint}")


def _import_from_working_folder(module: str, name: str, env_id: str) -> None:
    """Import `module`, finding it in the working folder as `python -m` would: `robot-rl` is a console script, so
    Python put its bin directory on sys.path, not the folder it runs in, and a lab's `my_lab_envs.py` beside the
    user was not found without PYTHONPATH=. The folder goes last, so it cannot shadow an installed package."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)
    try:
        importlib.import_module(module)
    except ImportError as e:
        raise UnknownEnvError(
            f"env spec {PREFIX + env_id!r}: cannot import {module!r}, the module that should register {name!r} "
            f"({e}); install its package, run from the folder that holds it, or check the module name"
        ) from None


# gymnasium's own tasks whose episodes end only at the time limit (no `terminated` in their step): gymnasium's API
# declares nothing, so the backend names them. The default agent drops clipped double Q on such tasks
# (`robot_rl.agents.sac.resolve_critics`); measured on HalfCheetah-v5 in bench/README.md.
WITHOUT_TERMINATION = frozenset({"HalfCheetah", "Swimmer", "Reacher", "Pusher", "HumanoidStandup", "Pendulum"})


def can_terminate(env_id: str) -> bool:
    """Whether ``gym:<env_id>``'s episodes can end before the time limit: False only for gymnasium's own tasks in
    ``WITHOUT_TERMINATION`` (any version); True for every other id, a third-party one included (it cannot tell)."""
    return spec_can_terminate(lookup(env_id))


def spec_can_terminate(env_spec: EnvSpec) -> bool:
    """``can_terminate`` for a registered spec (also what ``envs.from_gymnasium`` asks of a ``gym.make``'d env)."""
    entry = env_spec.entry_point
    own = isinstance(entry, str) and entry.startswith("gymnasium.envs.") and env_spec.namespace is None
    return not (own and env_spec.name in WITHOUT_TERMINATION)


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
    env = gym.make(env_spec, max_episode_steps=-1, disable_env_checker=True, **kwargs)
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
