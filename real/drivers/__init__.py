"""Robot drivers: one file per robot, each a ``robot_rl.real.robot.Robot``. ``make_driver(name, **kwargs)`` builds one.

* ``sim_arm``: the simulated MuJoCo arm (``robot_rl.real.drivers.sim_arm``), tested end to end;
* ``ur_rtde``: Universal Robots e-Series over RTDE (``robot_rl.real.drivers.ur_rtde``), written against the ``ur_rtde`` API
  and **untested on hardware**;
* ``lerobot``: any LeRobot robot (SO-100/SO-101, Koch, OMX, ...) in joint space (``robot_rl.real.drivers.lerobot_arm``),
  written against LeRobot 0.4's ``Robot`` API, tested against a double of it, **untested on hardware**.
"""

from __future__ import annotations

import importlib
from typing import Any

from ..robot import Robot

DRIVERS = {"sim_arm": ("sim_arm", "SimArm"), "ur_rtde": ("ur_rtde", "URRobot"), "lerobot": ("lerobot_arm", "LeRobotArm")}


def make_driver(name: str, **kwargs: Any) -> Robot:
    """The driver called ``name`` built with ``kwargs`` (the driver class's constructor arguments)."""
    if name not in DRIVERS:
        raise ValueError(f"unknown driver {name!r}; choose one of: {', '.join(DRIVERS)}")
    module, cls = DRIVERS[name]
    return getattr(importlib.import_module(f".{module}", __name__), cls)(**kwargs)
