"""Limits on what the robot **does**, measured, not only on what it is told (``SafetyFilter`` does the latter).

Why both: the filter clamps each command against the measured hand, but a driver's own servo target may lead the
hand (by centimetres on the simulated arm, by up to ``max_lead_m`` on ``ur_rtde``), servo dynamics overshoot, and
something may push the arm. So after every control tick the server hands the measured state to ``Supervisor``,
which checks, for Cartesian robots:

* **envelope**: how far the measured hand is outside the workspace box (soft beyond ``margin_m``, hard beyond
  ``hard_margin_m``). After an e-stop is cleared with the hand outside, moving back in is allowed and only moving
  further out is a breach, so the arm can be brought back;
* **speed**: the measured hand speed over the tick, from the observations' time stamps, against the robot's limit
  ``min(max_step_m * control_hz, max_speed_mps)``: above ``over_speed_tolerance`` times it (1: the stated limit) the
  tick is **over** (``speed_over``: counted, nothing else), above ``speed_tolerance`` soft, above
  ``hard_speed_tolerance`` hard. Keeping the measured speed within the limit is ``SpeedGovernor``'s job
  (``robot_rl.real.governor``, which scales the next command from the measured motion); ``speed_over`` counts the
  ticks where it did not;
* **tracking**: on a tick that applied a command, the distance between the commanded target (the hand at the tick
  plus the clamped displacement) and the measured hand after the tick, in step limits (soft
  ``tracking_steps``, hard ``hard_tracking_steps``);
* **state**: a state vector that is not finite or has the wrong size is a hard breach.

Levels: ``over`` (speed only) is counted and not reacted to; ``soft`` and ``hard`` are reacted to. The server reacts
(``robot_rl.real.server``): a soft breach makes the robot **hold** (commands refused with ``UNAVAILABLE`` until
``settle_ticks`` ticks in a row are clean; a hold that has not cleared after ``max_hold_s`` becomes hard); a hard
breach **stops** the driver and **latches** the e-stop. Every breached tick is counted by kind and level.
``check`` returns ``over`` breaches only when asked (``over=True``): a caller that holds on every breach that is not
hard must not be handed them. The soft and hard speed tolerances above 1 are there because a servo (the simulated
one too) overshoots a commanded speed for a tick or two, more without the governor: on the simulated arm, without
it, the proportional controller of ``tests/real/test_bridge_faults.py`` (k = 2.5) moves the hand up to 1.4x the
step limit at 1 m/s (1.6x at 0.2 m/s), full-speed random reversals 1.3-1.9x; with it, at most about 1.02x
(``tests/real/test_governor.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .robot import RobotObservation, RobotSpec


@dataclass(frozen=True)
class SupervisorConfig:
    """Soft and hard limits on the measured state (module docstring)."""

    margin_m: float = 0.01
    hard_margin_m: float = 0.03
    over_speed_tolerance: float = 1.0
    speed_tolerance: float = 1.5
    hard_speed_tolerance: float = 2.5
    tracking_steps: float = 2.5
    hard_tracking_steps: float = 5.0
    settle_ticks: int = 3
    max_hold_s: float = 2.0

    def validate(self) -> None:
        if not 0 <= self.margin_m <= self.hard_margin_m:
            raise ValueError(f"need 0 <= margin_m <= hard_margin_m, got {self.margin_m}, {self.hard_margin_m}")
        if not 1.0 <= self.over_speed_tolerance <= self.speed_tolerance <= self.hard_speed_tolerance:
            raise ValueError("need 1 <= over_speed_tolerance <= speed_tolerance <= hard_speed_tolerance, got "
                             f"{self.over_speed_tolerance}, {self.speed_tolerance}, {self.hard_speed_tolerance}")
        if not 0 < self.tracking_steps <= self.hard_tracking_steps:
            raise ValueError("need 0 < tracking_steps <= hard_tracking_steps, got "
                             f"{self.tracking_steps}, {self.hard_tracking_steps}")
        if self.settle_ticks < 1 or not self.max_hold_s > 0:
            raise ValueError(f"need settle_ticks >= 1 and max_hold_s > 0, got {self.settle_ticks}, {self.max_hold_s}")


@dataclass(frozen=True)
class Breach:
    kind: str  # envelope, speed, tracking, state
    level: str  # over (counted only; speed), soft (hold), hard (stop)
    message: str

    @property
    def key(self) -> str:
        return f"{self.kind}_{self.level}"


class Supervisor:
    """Checks each measured observation against the limits; see the module docstring."""

    _RECOVERY_SLACK_M = 0.002  # while recovering, moving out by less than this (noise) is not a breach

    def __init__(self, spec: RobotSpec, config: SupervisorConfig) -> None:
        config.validate()
        self.spec, self.config = spec, config
        self.period = 1.0 / spec.control_hz
        c = spec.cartesian
        self.enabled = c is not None
        if c is not None:
            self._low = np.asarray(c.workspace_low, np.float64)
            self._high = np.asarray(c.workspace_high, np.float64)
            self._ee = slice(*c.ee_slice)
            self.step_limit_m = min(c.max_step_m, c.max_speed_mps / spec.control_hz)
            self.speed_limit_mps = self.step_limit_m * spec.control_hz
        self._prev: np.ndarray | None = None
        self._prev_stamp = 0.0
        self._recovering = False
        self._recover_out = 0.0

    def outside(self, ee: np.ndarray) -> float:
        """Distance (m) of ``ee`` outside the workspace box (0 inside)."""
        return float(np.linalg.norm(np.maximum(self._low - ee, 0.0) + np.maximum(ee - self._high, 0.0)))

    def rebase(self, obs: RobotObservation | None) -> None:
        """Start afresh from ``obs`` (after connect, reset, or clearing the e-stop): no speed from the last
        sample, and a hand outside the margin may come back in."""
        self._prev = None
        if obs is None or not self.enabled:
            return
        ee = np.asarray(obs.state, np.float64)[self._ee]
        if ee.shape == (3,) and np.all(np.isfinite(ee)):
            self._prev, self._prev_stamp = ee, obs.stamp
            out = self.outside(ee)
            self._recovering, self._recover_out = out > self.config.margin_m, out

    def check(self, obs: RobotObservation, target: np.ndarray | None, *, over: bool = False) -> list[Breach]:
        """The breaches of this tick's measured ``obs``; ``target`` is the commanded hand position when the tick
        applied a command (None when it held). ``over``: also return a level ``over`` breach (``speed_over``) for a
        tick over the stated speed limit but within the soft tolerance, to be counted and not reacted to."""
        state = np.asarray(obs.state, np.float64).reshape(-1)
        if state.shape != (self.spec.state_dim,) or not np.all(np.isfinite(state)):
            self._prev = None
            return [Breach("state", "hard", f"driver reported a bad state (shape {state.shape}, finite "
                                            f"{bool(np.all(np.isfinite(state)))})")]
        if not self.enabled:
            return []
        c, ee = self.config, state[self._ee]
        breaches: list[Breach] = []

        out = self.outside(ee)
        if self._recovering:
            if out <= c.margin_m:
                self._recovering = False
            elif out > self._recover_out + self._RECOVERY_SLACK_M:
                level = "hard" if out > c.hard_margin_m else "soft"
                breaches.append(Breach("envelope", level, f"hand {out * 1e3:.1f} mm outside the workspace box and "
                                                          "moving further out"))
            self._recover_out = min(self._recover_out, out)
        elif out > c.margin_m:
            level = "hard" if out > c.hard_margin_m else "soft"
            limit = c.hard_margin_m if level == "hard" else c.margin_m
            breaches.append(Breach("envelope", level, f"hand {out * 1e3:.1f} mm outside the workspace box "
                                                      f"(limit {limit * 1e3:.1f} mm)"))

        if self._prev is not None:
            dt = obs.stamp - self._prev_stamp if obs.stamp > 0 and self._prev_stamp > 0 else self.period
            dt = max(dt, 0.5 * self.period)  # a repeated or missing stamp must not divide by ~0
            speed = float(np.linalg.norm(ee - self._prev)) / dt
            levels = (("hard", c.hard_speed_tolerance), ("soft", c.speed_tolerance), ("over", c.over_speed_tolerance))
            for level, tol in levels if over else levels[:2]:
                if speed > tol * self.speed_limit_mps:
                    breaches.append(Breach("speed", level, f"hand speed {speed:.3f} m/s over "
                                                           f"{tol:g} x the {self.speed_limit_mps:.3f} m/s limit"))
                    break

        if target is not None:
            err = float(np.linalg.norm(np.asarray(target, np.float64) - ee))
            for level, steps in (("hard", c.hard_tracking_steps), ("soft", c.tracking_steps)):
                if err > steps * self.step_limit_m:
                    breaches.append(Breach("tracking", level, f"hand {err * 1e3:.1f} mm from its commanded target "
                                                              f"(limit {steps * self.step_limit_m * 1e3:.1f} mm)"))
                    break

        self._prev, self._prev_stamp = ee, obs.stamp
        return breaches
