"""Environments for robot_rl: one ``make`` for gymnasium, dm_control and native MuJoCo tasks, in torch.

``make("gym:Hopper-v5", num_envs=8)``, ``make("dmc:walker-walk", num_envs=8)`` or
``make("mujoco:Hopper-v5", num_envs=64)`` (gymnasium's v5 locomotion tasks stepped as one batch on
``mujoco``'s thread pool, bit-identical to ``gym:``; see ``robot_rl.envs.mujoco_backend``) return a ``BatchedEnv`` (see ``robot_rl.envs.core`` for the full
contract); ``make_single`` returns one plain gymnasium env with the same normalisation, for tools that expect
the gymnasium API. ``make("arm:pick_place", num_envs=8)`` builds the tabletop arm tasks of ``robot_rl.envs.arm``
(reach, push, pick_place, track; ``-sparse`` and ``-pixels`` variants, see ``robot_rl.envs.arm_backend``).
"""

from __future__ import annotations

import os

# Headless rendering by default; must be set before anything imports mujoco / dm_control.
os.environ.setdefault("MUJOCO_GL", "egl")
# Classic-control tasks render through pygame/SDL: off-screen, so no display (or XDG_RUNTIME_DIR) is needed.
os.environ.setdefault("SDL_VIDEODRIVER", "dummy")

import importlib  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import gymnasium as gym  # noqa: E402
import torch  # noqa: E402

from .core import BatchedEnv, EnvOptions, SyncBatchedEnv, UnknownEnvError  # noqa: E402

__all__ = ["BatchedEnv", "SyncBatchedEnv", "UnknownEnvError", "from_gymnasium", "make", "make_single"]

# Backends are imported lazily: dm_control is slow to import and not every user needs it.
_BACKENDS = {
    "gym:": ".gym_backend",
    "dmc:": ".dmc_backend",
    "mujoco:": ".mujoco_backend",
    "arm:": ".arm_backend",
    "mjx:": ".sim.backend:mjx",
    "warp:": ".sim.backend:warp",
    "isaaclab:": ".isaaclab_backend",
}


def _register_with_gymnasium() -> None:
    from .arm_backend import register_gym_ids

    register_gym_ids()


_register_with_gymnasium()  # gymnasium.make("robot_rl/ArmPush-v0") after `import robot_rl.envs`


def _backend(spec: str) -> tuple[Any, str]:
    if isinstance(spec, str):
        for prefix, module in _BACKENDS.items():
            if spec.startswith(prefix) and len(spec) > len(prefix):
                module, _, attr = module.partition(":")  # "module:attr" names an object in the module
                found = importlib.import_module(module, __name__)
                return (getattr(found, attr) if attr else found), spec[len(prefix) :]
    choices = ", ".join(repr(p) for p in _BACKENDS)
    raise UnknownEnvError(
        f"unknown env spec {spec!r}: it must start with a backend prefix, one of {choices} "
        "(e.g. 'gym:Hopper-v5', 'dmc:walker-walk')"
    )


def _options(spec: str, *args: object) -> EnvOptions:
    """`EnvOptions(*args)`, refusing `full_state` where the spec observes no cameras beside a state, and
    `end_on_success=False` where the backend cannot go on past a task's success."""
    options = EnvOptions(*args)  # type: ignore[arg-type]
    if options.full_state and not (spec.startswith("arm:") and spec.endswith("-pixels")):
        raise ValueError(f"full_state=True: only arm:<task>-pixels specs observe cameras beside a state, got {spec!r}")
    if not options.end_on_success and not spec.startswith("arm:"):
        raise ValueError(f"end_on_success=False: only arm: specs can go on past a task's success, got {spec!r}")
    if options.practice and not spec.startswith("arm:"):
        raise ValueError(f"practice=True: only arm: specs practise without resets (their scene can go on), got {spec!r}")
    return options


def make_single(
    spec: str,
    seed: int | None = None,
    *,
    action_repeat: int = 1,
    max_episode_steps: int | None = None,
    render: bool = False,
    render_size: tuple[int, int] = (240, 320),
    camera_id: int | None = None,
    pixel_size: tuple[int, int] | None = None,
    full_state: bool = False,
    end_on_success: bool = True,
    practice: bool = False,
    practice_reset: str = "expert",
) -> gym.Env:
    """One gymnasium env for ``spec`` with float32 observations and actions in [-1, 1].

    With a ``seed`` the env is reset once with it (and its action space seeded), so the caller's following
    ``reset()`` calls form a reproducible stream. Options are as for ``make``.
    """
    options = _options(
        spec, action_repeat, max_episode_steps, render, render_size, camera_id, pixel_size, full_state, end_on_success,
        practice, practice_reset,
    )
    backend, name = _backend(spec)
    env, _ = backend.make_env(name, options)
    if seed is not None:
        env.reset(seed=seed)
        env.action_space.seed(seed)
    return env


def make(
    spec: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    *,
    action_repeat: int = 1,
    max_episode_steps: int | None = None,
    render: bool = False,
    render_size: tuple[int, int] = (240, 320),
    camera_id: int | None = None,
    pixel_size: tuple[int, int] | None = None,
    full_state: bool = False,
    end_on_success: bool = True,
    practice: bool = False,
    practice_reset: str = "expert",
    delay: Any = None,
) -> BatchedEnv:
    """A batch of ``num_envs`` copies of ``spec`` (``gym:<id>``, ``dmc:<domain>-<task>`` or ``mujoco:<id>``).

    Options:
        action_repeat: repeat each action k times, summing rewards and stopping early at episode end.
        max_episode_steps: time limit in agent steps; None = the task's default (gymnasium's registered limit
            or dm_control's, usually 1000 control steps) divided by ``action_repeat``, rounded up.
        render: create renderers so that ``env.render(i)`` works.
        render_size: (height, width) of rendered frames.
        camera_id: camera to render from (dm_control default 0; gymnasium MuJoCo default is the task's).
        pixel_size: (height, width) of camera observations (``arm:...-pixels``; default 84x84).
        full_state: ``arm:...-pixels`` only: ``state`` is the full task state instead of proprioception (frames
            for a camera reward classifier beside a state learner; such an env is no pixel task).
        end_on_success: ``arm:`` only: False lets episodes go on past the task's success (only the time limit, or
            a reward classifier around the env, ends them); ``info["success"]`` still reports each solved step.
        practice: ``arm:`` only: autonomous practice without resets (``robot_rl.envs.arm.ArmEnv``'s ``practice``):
            an episode starts with the cube where the last one left it, the arm at home and a new target; a scene the arm cannot recover
            is reset and flagged in ``info["human_reset"]`` (bool [N], in the infos of the steps where one happened).
        practice_reset: with ``practice``: ``"expert"`` (default) a scripted reset controller first moves the cube
            to a fresh start, its control steps in ``info["reset_steps"]`` (int [N], where an episode ended);
            ``"home"`` only the arm goes home.
        delay: an observation-to-action delay (``robot_rl.envs.delay.ActionDelay``, or an int: that many agent
            steps): each action lands that many steps after the observation it was computed from; with
            ``aware=True`` the actions in flight are appended to ``state``. None or 0: no delay.
    ``seed`` applies to the first ``reset()`` that gets no seed of its own. Unknown options raise TypeError.
    """
    if isinstance(num_envs, bool) or not isinstance(num_envs, int) or num_envs < 1:
        raise ValueError(f"num_envs must be an int >= 1, got {num_envs!r}")
    options = _options(
        spec, action_repeat, max_episode_steps, render, render_size, camera_id, pixel_size, full_state, end_on_success,
        practice, practice_reset,
    )
    delay = _delay(delay)
    backend, name = _backend(spec)
    if hasattr(backend, "make_batched"):  # steps the whole batch natively instead of a list of envs
        return _delayed(backend.make_batched(spec, name, num_envs, device, seed, options), delay)
    envs: list[gym.Env] = []
    limit: int | None = None
    try:
        for _ in range(num_envs):
            env, limit = backend.make_env(name, options)
            envs.append(env)
        knows = getattr(backend, "can_terminate", None)  # a backend that can tell which tasks never terminate
        return _delayed(SyncBatchedEnv(
            spec, envs, device=device, seed=seed, max_episode_steps=limit, render=options.render,
            can_terminate=None if knows is None else knows(name),
        ), delay)
    except BaseException:
        for env in envs:
            env.close()
        raise


def _delay(delay: Any) -> Any:
    """`make`'s `delay=` as an `ActionDelay`, or None for no delay."""
    if delay is None:
        return None
    from .delay import ActionDelay

    if not isinstance(delay, ActionDelay):
        delay = ActionDelay(steps=delay)
    return delay if delay.enabled else None


def _delayed(env: BatchedEnv, delay: Any) -> BatchedEnv:
    if delay is None:
        return env
    from .delay import DelayedEnv

    try:
        return DelayedEnv(env, delay)
    except BaseException:
        env.close()
        raise


def from_gymnasium(
    env: gym.Env | Callable[[], gym.Env],
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    *,
    action_repeat: int = 1,
    max_episode_steps: int | None = None,
) -> BatchedEnv:
    """Your own gymnasium env in the batched API, in one line: ``envs.from_gymnasium(lambda: MyEnv(), 4)``.

    ``env`` is a factory called ``num_envs`` times, or one env instance (then ``num_envs`` must be 1). The env
    gets what ``make`` gives every backend: actions in [-1, 1] mapped onto its Box action space, float32
    observations (a Dict mapped onto ``state`` and ``pixels`` groups, see ``wrappers.Float32Observation``),
    action repeat; its own time limit stays (a ``gymnasium.make``'d env has one), ``max_episode_steps`` adds
    one in agent steps.
    """
    from .wrappers import finish_single_env

    if isinstance(env, gym.Env) and num_envs != 1:
        raise ValueError("from_gymnasium: pass a factory (e.g. lambda: MyEnv()) for num_envs > 1, not an instance")
    options = EnvOptions(action_repeat, max_episode_steps, False, (240, 320), None)
    made: list[gym.Env] = []
    try:
        for _ in range(num_envs):
            single = env if isinstance(env, gym.Env) else env()
            if not isinstance(single, gym.Env):
                raise TypeError(f"from_gymnasium: the factory returned {type(single).__name__}, not a gymnasium.Env")
            if not isinstance(single.action_space, gym.spaces.Box):
                raise ValueError(f"from_gymnasium: a {type(single.action_space).__name__} action space; only "
                                 f"continuous (Box) actions are supported")
            wrapped, limit = finish_single_env(single, options, None)
            made.append(wrapped)
        inner = made[0].unwrapped
        name = getattr(inner.spec, "id", None) or type(inner).__name__
        knows = None  # an env's own `can_terminate` wins; a gym.make'd one of gymnasium's tasks is known by its spec
        if inner.spec is not None and not hasattr(inner, "can_terminate"):
            from .gym_backend import spec_can_terminate

            knows = spec_can_terminate(inner.spec)
        return SyncBatchedEnv(f"gym:{name}", made, device=device, seed=seed, max_episode_steps=limit,
                              can_terminate=knows)
    except BaseException:
        for e in made:
            e.close()
        raise
