"""``SpeedGovernor``: scales each commanded Cartesian displacement so that the **measured** hand speed stays within
the robot's stated limit ``min(max_step_m * control_hz, max_speed_mps)`` (one *step* = that limit times the control
period).

Why it is needed. ``SafetyFilter`` bounds each command by one step, against the hand measured at the tick. But a
servoed arm does not move by exactly what it is told: the driver's own target may *lead* the hand (the simulated
arm moves a desired grip point by each command and keeps it up to 5 cm ahead of the hand; ``ur_rtde`` moves its
servo target from the previous target, up to ``max_lead_m`` ahead), servos overshoot, and the response depends on
the arm's pose. Measured on the simulated arm with full-speed random reversals, the hand moved up to 1.7 step
limits in one tick and half of all ticks were over the limit (module ``tests/real/test_governor.py``).

The model, in step units, from nothing but the measured hand and what the server commanded (any Cartesian
``RobotSpec``; no driver internals):

* **lead**: ``L``, an estimate of how far the driver's target is still ahead of the hand: the sum of the commanded
  displacements minus the measured ones, times ``lead_decay`` per tick and at most ``max_lead_steps`` long (a
  driver may clip its target, at the workspace box or the arm's reach, so an undamped sum could drift);
* **response gain**: ``g``, how far the hand moves in a tick per unit of outstanding target, ``|d| / |L + u|``
  for a measured displacement ``d`` after a command ``u``. It is about 1.05 on the simulated arm at 20 Hz (the
  hand reaches and slightly overshoots its target in a tick), about 0.7 at 50 Hz (it lags), and varies from tick
  to tick (0.8 to 1.6 at 20 Hz on reversals, more near the arm's reach). The governor tracks its mean and its mean
  deviation from that mean, and uses ``g_hat = mean + spread * deviation`` (as TCP sizes its retransmission
  timeout): steady motion has a small deviation and runs close to the limit, erratic motion gets a margin. The
  deviation rises fast (``dev_rise``) and falls slowly (``dev_fall``); ticks with neither a command nor motion
  (holding still) teach nothing and are skipped;
* **limit**: the command this tick is ``s * u`` with the largest ``s`` in [0, 1] such that
  ``g_hat * |L + s u| <= target`` and ``g_hat * |s u| <= target``: the predicted motion is within ``target``
  steps, and the lead estimate may add predicted motion but never cancel the command's own (a wrong estimate must
  not let a command through). When the lead alone already predicts more (``g_hat |L| > target``), the command
  may not make it worse (``|L + s u| <= |L|``).

So a scaled command is always the requested displacement times a factor in [0, 1]: same direction, never a push
elsewhere; it stays inside the workspace box and the step limit wherever the filter's did (the segment from the
hand to a safe target). A governor that does not fit a robot can only slow it down, and the supervisor still
counts every tick over the limit (``robot_rl.real.supervisor``, breach ``speed_over``).

Measured on ``SimArm`` (``reach``; full-speed random reversals, 20 and 50 Hz, ``max_speed_mps`` 1.0 and 0.2; table
in ``tests/real/test_governor.py``): at most 1.02 step limits, 2 ticks in 16 000 over the limit (without: up to 1.9,
15-60 % of the ticks). Ordinary reaches (a straight full-speed move, proportional controllers) take the same number
of ticks at 20 Hz and 1 m/s (+1 at most), 20-30 % more at 0.2 m/s and 5-45 % more at 50 Hz, where the raw arm
itself overshoots the limit while it speeds up and the deviation it leaves takes some ticks to decay. The defaults
were chosen on those measurements; ``spread`` trades ticks over the limit against speed (on 5 seeds: 3, the
default: 0.01 % of the ticks over, up to 1.01; 2.5: 0.08 %, up to 1.04; 2: 0.2 %, up to 1.14; reaches 2 and 4 %
faster). Time stamps are not used: a late tick lets the hand move further in the tick, which only raises ``g_hat``.

Cost: numpy on 3-vectors and float arithmetic, about 25 us per tick for ``limit`` and ``observe`` together on the
shared 2-core development machine.

Use in the server's tick: ``SafetyFilter.clamp`` first (bounds, box, step), then ``limit`` on the clamped
displacement, then the driver gets the scaled action; after ``observe()``: ``observe(obs, commanded)`` with what
was sent (``None`` when the tick held); ``rebase(obs)`` after connect, a driver reset and clearing the e-stop.
"""

from __future__ import annotations

import math

import numpy as np

from .robot import RobotObservation, RobotSpec

_GAIN_MIN, _GAIN_MAX = 0.3, 4.0  # bounds on g_hat: a plant outside them is not one this model fits


class SpeedGovernor:
    """Scales commanded displacements so the measured hand speed stays within the limit (module docstring).

    Args:
        spec: the robot; without ``spec.cartesian`` the governor passes everything through.
        target: the predicted motion allowed per tick, in step limits.
        spread: deviations of the response gain added to its mean (more: fewer ticks over, slower).
        gain0, dev0: the response gain's mean and deviation before anything was measured.
        mean_rate: how fast the mean follows the measured gains (per tick).
        dev_rise, dev_fall: how fast the deviation follows a larger or a smaller one.
        lead_decay: factor per tick on the lead estimate.
        max_lead_steps: the lead estimate's largest length, in step limits.
        min_motion_steps: ticks whose outstanding target and measured motion are both shorter than this (in step
            limits) do not update the gain; a shorter outstanding target counts as this long.

    ``rebase`` forgets the motion (lead, last hand position), not the learned response: that belongs to the
    robot, not to an episode. Make a new governor to forget it too.
    """

    def __init__(
        self,
        spec: RobotSpec,
        *,
        target: float = 0.97,
        spread: float = 3.0,
        gain0: float = 1.1,
        dev0: float = 0.05,
        mean_rate: float = 0.3,
        dev_rise: float = 0.5,
        dev_fall: float = 0.1,
        lead_decay: float = 0.8,
        max_lead_steps: float = 3.0,
        min_motion_steps: float = 0.3,
    ) -> None:
        if not 0 < target <= 1:
            raise ValueError(f"target must be in (0, 1], got {target}")
        if spread < 0 or not _GAIN_MIN <= gain0 <= _GAIN_MAX or dev0 < 0:
            raise ValueError(f"need spread >= 0, {_GAIN_MIN} <= gain0 <= {_GAIN_MAX}, dev0 >= 0; got "
                             f"{spread}, {gain0}, {dev0}")
        for name, rate in (("mean_rate", mean_rate), ("dev_rise", dev_rise), ("dev_fall", dev_fall),
                           ("lead_decay", lead_decay)):
            if not 0 <= rate <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {rate}")
        if not max_lead_steps >= 0 or not min_motion_steps > 0:
            raise ValueError(f"need max_lead_steps >= 0 and min_motion_steps > 0, got {max_lead_steps}, "
                             f"{min_motion_steps}")
        c = spec.cartesian
        self.enabled = c is not None
        self.step_m = min(c.max_step_m, c.max_speed_mps / spec.control_hz) if c is not None else 0.0
        self._ee = slice(*c.ee_slice) if c is not None else slice(0, 0)
        self.target, self.spread = float(target), float(spread)
        self.mean_rate, self.dev_rise, self.dev_fall = float(mean_rate), float(dev_rise), float(dev_fall)
        self.lead_decay = float(lead_decay)
        self.max_lead_m = float(max_lead_steps) * self.step_m
        self.min_motion_m = float(min_motion_steps) * self.step_m
        self.mean, self.dev = float(gain0), float(dev0)
        self.lead = np.zeros(3)  # metres
        self._prev: np.ndarray | None = None  # the hand at the last observation

    @property
    def gain(self) -> float:
        """``g_hat``: the response gain the next ``limit`` assumes."""
        return min(_GAIN_MAX, max(_GAIN_MIN, self.mean + self.spread * self.dev))

    def _hand(self, obs: RobotObservation | None) -> np.ndarray | None:
        if obs is None:
            return None
        ee = np.asarray(obs.state, np.float64).reshape(-1)[self._ee]
        return ee.copy() if ee.shape == (3,) and math.isfinite(float(ee.sum())) else None  # sum: NaN if any is

    def rebase(self, obs: RobotObservation | None) -> None:
        """Start afresh from ``obs`` (connect, driver reset, e-stop cleared): no lead, no last position."""
        self.lead = np.zeros(3)
        self._prev = self._hand(obs) if self.enabled else None

    def limit(self, delta_m: np.ndarray, obs: RobotObservation) -> tuple[np.ndarray, bool]:
        """The displacement (metres, 3 numbers) to command this tick, ``delta_m`` times a factor in [0, 1], and
        whether it was scaled. ``delta_m`` is the safety filter's clamped displacement, ``obs`` the observation it
        was clamped against."""
        u = np.array(delta_m, np.float64).reshape(3)
        if not self.enabled:
            return u, False
        if self._prev is None:
            self._prev = self._hand(obs)
        uu = float(u @ u)
        if uu == 0.0:
            return u, False
        p = self.lead
        radius = self.target * self.step_m / self.gain
        pp, pu = float(p @ p), float(p @ u)
        # The largest s with |p + s u| <= max(radius, |p|): a root of uu s^2 + 2 pu s + pp - r^2 = 0.
        r2 = max(radius * radius, pp)
        s = (-pu + math.sqrt(max(pu * pu - uu * (pp - r2), 0.0))) / uu
        s = min(s, radius / math.sqrt(uu), 1.0)
        if s >= 1.0:
            return u, False
        u *= max(s, 0.0)
        return u, True

    def observe(self, obs: RobotObservation, commanded_m: np.ndarray | None) -> None:
        """After the tick: the measured ``obs`` and the displacement commanded in it (``None`` when it held)."""
        if not self.enabled:
            return
        ee = self._hand(obs)
        if ee is None:  # a bad state: the supervisor reacts; start again from the next good one
            self.rebase(None)
            return
        prev, self._prev = self._prev, ee
        if prev is None:
            return
        d = ee - prev
        after = self.lead if commanded_m is None else self.lead + np.asarray(commanded_m, np.float64).reshape(3)
        n, nd = math.sqrt(float(after @ after)), math.sqrt(float(d @ d))
        if max(n, nd) >= self.min_motion_m:
            err = nd / max(n, self.min_motion_m) - self.mean
            dv = abs(err) - self.dev
            self.dev += (self.dev_rise if dv > 0 else self.dev_fall) * dv
            self.mean = min(_GAIN_MAX, max(_GAIN_MIN, self.mean + self.mean_rate * err))
        lead = (after - d) * self.lead_decay
        ln = math.sqrt(float(lead @ lead))
        if ln > self.max_lead_m:
            lead *= self.max_lead_m / ln
        self.lead = lead
