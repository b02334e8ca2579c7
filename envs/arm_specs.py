"""The ``arm:<task>[-sparse][-pixels]`` spec names: listing and parsing.

Apart from ``robot_rl.envs.arm_backend`` and from the ``robot_rl.envs.arm`` package, and importing neither: the
arm package (its scripted experts) parses specs, the backend imports the arm package (lazily, so that importing
``robot_rl.envs`` does not load the MuJoCo scene), and this module is what both read.
"""

from __future__ import annotations

import difflib

from .core import UnknownEnvError

PREFIX = "arm:"
TASKS = ("reach", "push", "pick_place", "track")


def spec_names() -> list[str]:
    """Every valid ``arm:`` spec."""
    return [
        f"{PREFIX}{task}{sparse}{pixels}"
        for task in TASKS
        for sparse in ("", "-sparse")
        for pixels in ("", "-pixels")
    ]


def parse(name: str) -> tuple[str, str, bool]:
    """Split a spec name without the prefix into ``(task, reward, pixels)``; raises ``UnknownEnvError``."""
    rest, pixels, reward = name, False, "dense"
    if rest.endswith("-pixels"):
        rest, pixels = rest[: -len("-pixels")], True
    if rest.endswith("-sparse"):
        rest, reward = rest[: -len("-sparse")], "sparse"
    if rest not in TASKS:
        valid = spec_names()
        close = difflib.get_close_matches(PREFIX + name, valid, n=3, cutoff=0.6)
        hint = f"close matches: {', '.join(close)}; " if close else ""
        raise UnknownEnvError(f"unknown env spec {PREFIX + name!r}: {hint}valid choices: {', '.join(valid)}")
    return rest, reward, pixels
