"""Tabletop arm backend: ``arm:<task>[-sparse][-pixels]`` specs over ``robot_rl.envs.arm.ArmEnv``.

Tasks are ``reach``, ``push`` and ``pick_place`` (see ``robot_rl.envs.arm.tasks`` for control, observation layout and
rewards). Suffixes, in this order:

* ``-sparse``: reward 1.0 on success, else 0.0 (without it: the dense shaped reward);
* ``-pixels``: the observation becomes ``{"state": float32 [7], "pixels/front": uint8 [H, W, 3],
  "pixels/wrist": uint8 [H, W, 3]}``: proprioception (``PROPRIO_KEYS``: grip point, its velocity, gripper
  opening; no cube or target) and the fixed ``front`` and hand-mounted ``wrist`` cameras. ``(H, W)`` is
  ``pixel_size`` (default 84x84); for compatibility a non-default ``render_size`` given without ``pixel_size``
  still sets it (the default ``render_size`` of 240x320 is meant for videos, not for learning from pixels).

Examples: ``arm:reach``, ``arm:push-sparse``, ``arm:pick_place-sparse-pixels``. The default time limit is the
task's (``robot_rl.envs.arm.TIME_LIMITS``: reach 50, push 100, pick_place 100, track 100 control steps at 20 Hz), divided by
``action_repeat``. ``camera_id`` picks the camera for ``render()`` (0 = ``front``, 1 = ``side``, 2 = ``wrist``).
"""

from __future__ import annotations

import gymnasium as gym

from .arm_specs import PREFIX, parse, spec_names
from .core import EnvOptions
from .wrappers import ActionRepeat, NormalizedAction, default_time_limit

PIXELS_SIZE = (84, 84)
_DEFAULT_RENDER_SIZE = EnvOptions().render_size


def make_env(name: str, options: EnvOptions) -> tuple[gym.Env, int | None]:
    """Build one arm env for ``name`` (spec without ``arm:``); returns it and its time limit in agent steps."""
    task, reward, pixels = parse(name)
    from .arm import TIME_LIMITS, ArmEnv  # lazy: keeps `import envs` free of the MuJoCo scene

    pixel_size = options.pixel_size
    if pixel_size is None:
        pixel_size = options.render_size if options.render_size != _DEFAULT_RENDER_SIZE else PIXELS_SIZE
    env: gym.Env = ArmEnv(
        task,
        reward,
        pixels=pixels,
        pixel_size=pixel_size,
        full_state=options.full_state,
        end_on_success=options.end_on_success,
        practice=options.practice,
        practice_reset=options.practice_reset,
        render_mode="rgb_array" if options.render else None,
        render_size=options.render_size,
        camera="front" if options.camera_id is None else options.camera_id,
    )
    try:
        env = NormalizedAction(env)  # identity on Box(-1, 1); keeps the shared NaN / shape checks
        if options.action_repeat > 1:
            env = ActionRepeat(env, options.action_repeat)
        limit = options.max_episode_steps
        if limit is None:
            limit = default_time_limit(TIME_LIMITS[task], options.action_repeat)
        env = gym.wrappers.TimeLimit(env, int(limit))
    except Exception:
        env.close()
        raise
    return env, limit


# -- gymnasium registration --------------------------------------------------------------------------------
GYM_NAMESPACE = "robot_rl"


def gym_ids() -> dict[str, str]:
    """gymnasium id -> arm spec: ``robot_rl/ArmPush-v0`` is ``arm:push``, ``robot_rl/ArmPickPlaceSparsePixels-v0``
    is ``arm:pick_place-sparse-pixels``."""
    ids = {}
    for spec in spec_names():
        name = spec[len(PREFIX):]
        camel = "".join(part.capitalize() for part in name.replace("-", "_").split("_"))
        ids[f"{GYM_NAMESPACE}/Arm{camel}-v0"] = spec
    return ids


def gym_entry_point(spec: str, render_mode: str | None = None, **options) -> gym.Env:
    """What ``gymnasium.make("robot_rl/Arm...-v0")`` calls: the env ``make_single(spec)`` builds (actions in
    [-1, 1], the task's time limit), with gymnasium's ``render_mode="rgb_array"`` mapped onto ``render=True``."""
    from . import make_single

    return make_single(spec, render=render_mode == "rgb_array", **options)


def register_gym_ids() -> None:
    """Register the arm tasks with gymnasium (cheap: nothing is built until ``gymnasium.make``)."""
    for gym_id, spec in gym_ids().items():
        if gym_id not in gym.registry:
            gym.register(gym_id, entry_point=gym_entry_point, kwargs={"spec": spec})
