"""Config dataclass fields that carry their own help text (shown by `robot-rl <command> --help`)."""

from __future__ import annotations

import copy
from dataclasses import field
from typing import Any


def help_field(default: Any, text: str) -> Any:
    """A dataclass field with a default and a one-line help string."""
    if isinstance(default, (list, dict)):  # mutable: each instance gets its own copy
        return field(default_factory=lambda: copy.deepcopy(default), metadata={"help": text})
    return field(default=default, metadata={"help": text})
