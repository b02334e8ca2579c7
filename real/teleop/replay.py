"""Replay a recorded sequence of teleop commands.

Why: tests of the intervention pipeline need an operator whose every step is known in advance (take over at
step 5, send SUCCESS at step 12), and a recorded session can be replayed against a changed server to see
whether it still behaves the same. ``ReplayTeleop`` returns step ``i`` of its arrays on the ``i``-th read
after ``reset()``; past the end it returns a zero, inactive command (the operator has let go) and ``done``
turns True.

``.npz`` layout (``ReplayTeleop.from_npz`` / ``save_npz``): ``actions`` float [T, action_dim]; optional
``active`` bool [T]; optional ``events`` str [T], each entry a comma-separated list of ``Event`` values
(``"success"``, ``"estop,rewind"``, ``""``), so the file loads without pickle.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

import numpy as np

from .base import Event, Teleop, TeleopCommand


def _parse_events(entry: str | Iterable[Event | str]) -> frozenset[Event]:
    names = [n for n in entry.split(",") if n.strip()] if isinstance(entry, str) else list(entry)
    return frozenset(Event(n.strip() if isinstance(n, str) else n) for n in names)


class ReplayTeleop(Teleop):
    """Replays ``actions`` (and optional per-step ``active`` flags and ``events``) one step per read.

    Args:
        actions: [T, action_dim] actions; values outside [-1, 1] are rejected, not clipped, so a bad
            recording is noticed.
        active: one flag for every step, or [T] flags (default: active on every step).
        events: [T] entries, each a set of ``Event`` (or their values) or a comma-separated string.
        loop: start over after the last step instead of going idle.
    """

    def __init__(
        self,
        actions: np.ndarray | Sequence[Sequence[float]],
        active: bool | np.ndarray | Sequence[bool] = True,
        events: Sequence[str | Iterable[Event | str]] | np.ndarray | None = None,
        loop: bool = False,
    ) -> None:
        acts = np.asarray(actions, dtype=np.float32)
        if acts.ndim != 2 or len(acts) == 0:
            raise ValueError(f"actions must be a non-empty [T, action_dim] array, got shape {acts.shape}")
        if not np.all(np.isfinite(acts)) or np.any(np.abs(acts) > 1.0):
            raise ValueError("actions must be finite and inside [-1, 1]")
        n = len(acts)
        flags = np.broadcast_to(np.asarray(active, dtype=bool), (n,)).copy()
        if events is None:
            steps: list[frozenset[Event]] = [frozenset()] * n
        else:
            steps = [_parse_events(e) for e in events]
            if len(steps) != n:
                raise ValueError(f"events has {len(steps)} entries for {n} actions")
        self.actions, self.active, self.events = acts, flags, steps
        self.action_dim = acts.shape[1]
        self.loop = bool(loop)
        self.index = 0

    @classmethod
    def from_npz(cls, path: str | os.PathLike, loop: bool = False) -> ReplayTeleop:
        """Load a recording saved with ``save_npz`` (see the module docstring for the keys)."""
        with np.load(path, allow_pickle=False) as data:
            actions = data["actions"]
            active = data["active"] if "active" in data else True
            events = [str(e) for e in data["events"]] if "events" in data else None
        return cls(actions, active=active, events=events, loop=loop)

    def save_npz(self, path: str | os.PathLike) -> None:
        """Write this recording in the layout ``from_npz`` reads."""
        events = np.array([",".join(sorted(e.value for e in step)) for step in self.events], dtype=str)
        np.savez(path, actions=self.actions, active=self.active, events=events)

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def done(self) -> bool:
        """All steps have been replayed (never True with ``loop``)."""
        return self.index >= len(self.actions)

    def reset(self) -> None:
        """Start again from step 0."""
        self.index = 0

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """The next recorded step; a zero, inactive command once the recording is exhausted."""
        if self.done and self.loop:
            self.index = 0
        if self.done:
            return TeleopCommand(action=np.zeros(self.action_dim, dtype=np.float32), active=False)
        i = self.index
        self.index += 1
        return TeleopCommand(
            action=self.actions[i].copy(), active=bool(self.active[i]), events=self.events[i]
        )
