"""Building a LeRobot robot or teleoperator by its config type name (``so101_follower``, ``so101_leader``, ...),
for ``driver=lerobot`` and ``teleop=lerobot``. LeRobot is imported only here and only when a device is built by
name, so neither adapter needs it to wrap an object it is handed (or to be tested)."""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

INSTALL_HINT = ("needs LeRobot (pip install -e '.[robot,lerobot]' without -c constraints.txt: LeRobot <= 0.4.4 asks "
                "for torch < 2.11, so install it in an environment of its own)")

# kind -> (config module, config base class, factory module, factory function): LeRobot 0.4's layout
_KINDS = {
    "robot": ("lerobot.robots.config", "RobotConfig", "lerobot.robots.utils", "make_robot_from_config"),
    "teleoperator": ("lerobot.teleoperators.config", "TeleoperatorConfig", "lerobot.teleoperators.utils",
                     "make_teleoperator_from_config"),
}


def build_lerobot_device(kind: str, type_name: str, config: Mapping[str, Any] | None, *, what: str,
                         port: str | None = None, id: str | None = None) -> Any:  # noqa: A002
    """The LeRobot ``kind`` ("robot" or "teleoperator") of config type ``type_name`` with the config's fields
    ``config`` (``port`` and ``id``, which every arm has, may be given apart); ``what`` names the command-line key
    in the install hint (``driver=lerobot``)."""
    config_module, config_class, factory_module, factory = _KINDS[kind]
    try:
        base = getattr(importlib.import_module(config_module), config_class)
        make = getattr(importlib.import_module(factory_module), factory)
    except ImportError as err:
        raise ImportError(f"{what} {INSTALL_HINT}") from err
    # A device's config class registers its type name when its module is imported, and LeRobot's packages do not
    # import their devices (its scripts import them one by one): import each (a device whose own SDK is missing
    # is skipped; asking for it then says which types are known).
    package = importlib.import_module(config_module.rsplit(".", 1)[0])
    for module in pkgutil.iter_modules(package.__path__):
        try:
            importlib.import_module(f"{package.__name__}.{module.name}")
        except Exception:  # noqa: BLE001, S112  (an optional SDK of another device)
            continue
    try:
        cls = base.get_choice_class(type_name)
    except KeyError as err:
        raise ValueError(f"unknown LeRobot {kind} type {type_name!r}; choose one of: "
                         f"{', '.join(sorted(base.get_known_choices()))}") from err
    fields = dict(config or {})
    fields.update({k: v for k, v in (("port", port), ("id", id)) if v is not None})
    return make(cls(**fields))
