"""Atomic checkpoint files: a run killed at any instant leaves either the old or the new file, never half of one."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from robot_rl.errors import UserError


class CheckpointError(UserError, RuntimeError):
    """A checkpoint is missing, unreadable or from an incompatible run."""


def atomic_save(obj: Any, path: str | Path) -> None:
    """torch.save to a temporary file in the same directory, fsync, then rename over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(obj, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: keys that say where and how a run continues, not what it is: they differ on every resume
RESUME_KEYS = frozenset({"resume", "run_dir"})


def config_changes(saved: Mapping[str, Any], now: Mapping[str, Any], prefix: str = "") -> list[str]:
    """`key (saved -> now)` for each dotted config key whose value differs between a checkpoint's config and the
    resumed run's: when the weights do not fit, these name what the user changed (a state_dict's size-mismatch
    dump names tensors, not the key that made them)."""
    changes = []
    for key in sorted(saved.keys() | now.keys()):
        if not prefix and key in RESUME_KEYS:
            continue
        a, b = saved.get(key), now.get(key)
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            changes += config_changes(a, b, f"{prefix}{key}.")
        elif a != b:
            changes.append(f"{prefix}{key} ({a} -> {b})")
    return changes


def _missing(path: Path) -> str:
    """Why `path` is not there, and what to load instead."""
    if path.is_dir():
        return f"{path} is a directory; pass a checkpoint file in it ({', '.join(p.name for p in path.glob('*.pt'))})"
    others = sorted(p.name for p in path.parent.glob("*.pt")) if path.parent.is_dir() else []
    if others:
        return f"no checkpoint at {path}; {path.parent} holds {', '.join(others)}"
    if path.parent.name == "checkpoints" and (path.parent.parent / "config.yaml").is_file():
        return f"no checkpoint at {path}: the run has not reached its first checkpoint yet"
    return f"no checkpoint at {path}: no such file"


def load(path: str | Path) -> dict:
    """Load a checkpoint written by `atomic_save`, with an error that says what to do when it is unusable."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(_missing(path))
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # torch raises several types for truncated or foreign files
        raise CheckpointError(
            f"checkpoint {path} is corrupt or not a robot_rl checkpoint ({type(e).__name__}); "
            f"delete it to fall back to another checkpoint, or start a new run"
        ) from e
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path} is not a robot_rl checkpoint")
    return state
