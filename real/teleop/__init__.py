"""Teleoperation devices for the hardware bridge: the ``Teleop`` interface, the frame transform, and devices.

``make_teleop(name, **kwargs)`` builds a device by name (``keyboard``, ``gamepad``, ``spacemouse``,
``scripted``, ``replay``, ``person``, ``lerobot``). Device modules are imported only when asked for, so ``import real.teleop`` never
pulls in pygame, pyspacemouse, termios or torch; the device classes are also reachable as attributes
(``robot_rl.real.teleop.KeyboardTeleop``), imported on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from .base import Event, Teleop, TeleopCommand
from .frames import PRESETS, AxisShaping, DeviceFrame, to_action

# name -> (module, class)
TELEOPS: dict[str, tuple[str, str]] = {
    "keyboard": ("robot_rl.real.teleop.keyboard", "KeyboardTeleop"),
    "gamepad": ("robot_rl.real.teleop.gamepad", "GamepadTeleop"),
    "spacemouse": ("robot_rl.real.teleop.spacemouse", "SpaceMouseTeleop"),
    "scripted": ("robot_rl.real.teleop.scripted", "ScriptedTeleop"),
    "replay": ("robot_rl.real.teleop.replay", "ReplayTeleop"),
    "person": ("robot_rl.real.teleop.person", "SimulatedPerson"),
    "lerobot": ("robot_rl.real.teleop.lerobot_leader", "LeRobotTeleop"),
}
_CLASSES = {cls: module for module, cls in TELEOPS.values()}

__all__ = [
    "PRESETS",
    "TELEOPS",
    "AxisShaping",
    "DeviceFrame",
    "Event",
    "GamepadTeleop",
    "KeyboardTeleop",
    "LeRobotTeleop",
    "ReplayTeleop",
    "ScriptedTeleop",
    "SimulatedPerson",
    "SpaceMouseTeleop",
    "Teleop",
    "TeleopCommand",
    "make_teleop",
    "to_action",
]


def make_teleop(name: str, **kwargs: Any) -> Teleop:
    """Build the teleop device called ``name`` with its constructor's keyword arguments."""
    if name not in TELEOPS:
        raise ValueError(f"unknown teleop device {name!r}; choose one of: {', '.join(TELEOPS)}")
    module, cls = TELEOPS[name]
    return getattr(importlib.import_module(module), cls)(**kwargs)


def __getattr__(name: str) -> Any:
    """Import a device class on first access (PEP 562), keeping the package import light."""
    if name in _CLASSES:
        return getattr(importlib.import_module(_CLASSES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
