"""Robot-side safety: every command passes through ``SafetyFilter`` before a driver sees it.

The filter runs in the server, beside the motors, so limits hold whatever the learner sends. In order:

1. **Reject** (the command never reaches the driver; the robot holds this tick): wrong shape, NaN or inf.
2. **Clamp** to the action bounds of the spec.
3. **Clamp** (Cartesian robots) the commanded displacement so that the target ``ee + a[:3] * metres_per_unit``
   stays inside the workspace box,
4. and so that its length is at most ``min(max_step_m, max_speed_mps / control_hz)``.

Every rejection and clamp is counted by reason; ``SafetyResult.flags`` tells the client which clamps fired.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

import numpy as np

from .robot import RobotSpec

CLAMP_BOUNDS, CLAMP_WORKSPACE, CLAMP_STEP = 1, 2, 4
CLAMP_GOVERNOR = 8  # set by the server's speed governor (robot_rl.real.governor), not by this filter
_CLAMP_NAMES = {CLAMP_BOUNDS: "bounds", CLAMP_WORKSPACE: "workspace", CLAMP_STEP: "step"}


class UnsafeCommand(ValueError):
    """A command the filter refuses; ``reason`` is the counter it went to."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass
class SafetyResult:
    action: np.ndarray  # float64 [action_dim], safe to send
    flags: int  # CLAMP_* bits that fired


class SafetyFilter:
    """Checks and clamps actions for one robot (see the module docstring)."""

    def __init__(self, spec: RobotSpec) -> None:
        self.spec = spec
        self.low = np.asarray(spec.action_low, dtype=np.float64)
        self.high = np.asarray(spec.action_high, dtype=np.float64)
        self.rejected: Counter[str] = Counter()
        self.clamped: Counter[str] = Counter()
        self._count_lock = threading.Lock()  # gRPC workers validate, the control loop clamps: both count
        c = spec.cartesian
        if c is not None:
            self._box_low = np.asarray(c.workspace_low, dtype=np.float64)
            self._box_high = np.asarray(c.workspace_high, dtype=np.float64)
            self._max_step = min(c.max_step_m, c.max_speed_mps / spec.control_hz)
            self._ee = slice(*c.ee_slice)

    @property
    def max_step_m(self) -> float | None:
        """The displacement limit per control step in metres (Cartesian robots)."""
        return self._max_step if self.spec.cartesian is not None else None

    def check(self, action: object, state: np.ndarray | None) -> SafetyResult:
        """``validate`` then ``clamp``: the safe version of ``action`` given the robot's latest ``state``."""
        return self.clamp(self.validate(action), state)

    def validate(self, action: object) -> np.ndarray:
        """The action as float64 if its type, shape and values are acceptable; raises ``UnsafeCommand``."""
        try:
            a = np.array(action, dtype=np.float64)
        except (TypeError, ValueError) as e:
            self._count(self.rejected, "type")
            raise UnsafeCommand("type", f"action is not a numeric vector: {e}") from None
        if a.shape != (self.spec.action_dim,):
            self._count(self.rejected, "shape")
            raise UnsafeCommand("shape", f"action must have shape ({self.spec.action_dim},), got {a.shape}")
        if not np.all(np.isfinite(a)):
            self._count(self.rejected, "nonfinite")
            raise UnsafeCommand("nonfinite", f"action contains NaN or inf: {a.tolist()}")
        return a

    def clamp(self, action: np.ndarray, state: np.ndarray | None) -> SafetyResult:
        """Clamp a validated action to the bounds, the workspace box and the step limit at ``state``."""
        flags = 0
        a = np.clip(action, self.low, self.high)
        if not np.array_equal(a, action):
            flags |= CLAMP_BOUNDS
        c = self.spec.cartesian
        if c is not None:
            if state is None:
                self._count(self.rejected, "no_state")
                raise UnsafeCommand("no_state", "no robot state yet: reset the robot before commanding it")
            ee = np.asarray(state, dtype=np.float64)[self._ee]
            delta = a[:3] * c.metres_per_unit
            # A hand already outside the box (pushed there by a collision) may move back in, never further out.
            target = np.clip(ee + delta, np.minimum(self._box_low, ee), np.maximum(self._box_high, ee))
            if not np.allclose(target, ee + delta, rtol=0.0, atol=1e-12):
                flags |= CLAMP_WORKSPACE
                delta = target - ee
            norm = float(np.linalg.norm(delta))
            if norm > self._max_step:
                flags |= CLAMP_STEP
                delta *= self._max_step / norm
            a[:3] = delta / c.metres_per_unit
        for bit, name in _CLAMP_NAMES.items():
            if flags & bit:
                self._count(self.clamped, name)
        return SafetyResult(a, flags)

    def _count(self, counter: Counter[str], key: str) -> None:
        with self._count_lock:
            counter[key] += 1

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """Copies of the rejection and clamp counters, taken consistently."""
        with self._count_lock:
            return dict(self.rejected), dict(self.clamped)
