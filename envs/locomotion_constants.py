"""gymnasium's v5 locomotion tasks (HalfCheetah, Hopper, Walker2d) as constants: MJCF file and default kwargs.

The table behind the torch task of ``robot_rl.envs.sim`` (``robot_rl.envs.sim.tasks.locomotion``, which
``mujoco:<id>``, ``mjx:<id>`` and ``warp:<id>`` run) and the spec lookup of ``robot_rl.envs.mujoco_backend``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium.envs.mujoco

ASSETS = Path(gymnasium.envs.mujoco.__file__).resolve().parent / "assets"  # gymnasium's own MJCF files


@dataclass(frozen=True)
class Task:
    """One gymnasium v5 locomotion task with its default kwargs, in the terms the vectorised code needs.

    The values are copied from gymnasium's ``<task>_v5.py`` constructors; ``tests/envs/test_mujoco_backend``
    checks step by step against gymnasium, so a drift in either shows up as a failing test.
    """

    xml_file: str
    frame_skip: int
    ctrl_cost_weight: float
    reset_noise_scale: float
    qvel_reset_noise: str  # "uniform": U(-s, s); "normal": s * N(0, 1)
    forward_reward_weight: float = 1.0
    obs_qvel_clip: float | None = None  # Hopper/Walker clip qvel in the observation (not in the state)
    healthy_reward: float = 0.0
    terminate_when_unhealthy: bool = False
    healthy_z_range: tuple[float, float] | None = None
    healthy_angle_range: tuple[float, float] | None = None
    healthy_state_range: tuple[float, float] | None = None  # on state_vector()[2:], Hopper only
    camera: dict[str, Any] = field(default_factory=dict)  # gymnasium's DEFAULT_CAMERA_CONFIG


TASKS: dict[str, Task] = {
    "HalfCheetah-v5": Task(
        xml_file="half_cheetah.xml",
        frame_skip=5,
        ctrl_cost_weight=0.1,
        reset_noise_scale=0.1,
        qvel_reset_noise="normal",
        camera={"distance": 4.0},
    ),
    "Hopper-v5": Task(
        xml_file="hopper.xml",
        frame_skip=4,
        ctrl_cost_weight=1e-3,
        reset_noise_scale=5e-3,
        qvel_reset_noise="uniform",
        obs_qvel_clip=10.0,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        healthy_z_range=(0.7, float("inf")),
        healthy_angle_range=(-0.2, 0.2),
        healthy_state_range=(-100.0, 100.0),
        camera={"trackbodyid": 2, "distance": 3.0, "lookat": (0.0, 0.0, 1.15), "elevation": -20.0},
    ),
    "Walker2d-v5": Task(
        xml_file="walker2d_v5.xml",
        frame_skip=4,
        ctrl_cost_weight=1e-3,
        reset_noise_scale=5e-3,
        qvel_reset_noise="uniform",
        obs_qvel_clip=10.0,
        healthy_reward=1.0,
        terminate_when_unhealthy=True,
        healthy_z_range=(0.8, 2.0),
        healthy_angle_range=(-1.0, 1.0),
        camera={"trackbodyid": 2, "distance": 4.0, "lookat": (0.0, 0.0, 1.15), "elevation": -20.0},
    ),
}
