"""A simulated person at the teleop device: the operator model of the human-in-the-loop benchmark.

Why: no person sits at the machines that run the benchmarks, and the scripted expert (``ScriptedTeleop``) is an
ideal operator: it sees every state at once, corrects without error, never mislabels. Results measured with it
say how the loop does with a perfect person, not with the one a robot user is. ``SimulatedPerson`` keeps the
expert's skill (it drives with ``ScriptedExpert``) and adds what a person brings, each a seeded, documented knob:

* **Reaction delay** (``reaction_s``, 0.3 s: the simple visual reaction time of an attentive adult is 0.2-0.3 s).
  The person's decisions come ``reaction_s`` late: take-over, hand-back and the success verdict are computed from
  the state of ``reaction_s`` ago. The hand's motion while driving is not delayed: a person's visuomotor control
  predicts over its own delay, while the expert, a feedback controller, does not (with its input delayed by 0.1 s
  it solved 2 of 20 push episodes instead of 20 of 20), so a raw delay would model a worse hand, not a person.
* **Imperfect corrections.** Each take-over has its own gain (the person moves the device ``gain_range`` of the
  expert's speed) and every action carries Gaussian noise (``noise``) plus a slowly varying drift (an
  Ornstein-Uhlenbeck process, ``drift``, time constant 1 s): a hand is neither exact nor memoryless.
* **When to take over.** When the policy stalls (the task's progress measure, ``task_progress``, has not improved
  by ``min_progress`` for ``patience_s``) or heads for failure (progress is ``failing_margin`` worse than the best
  of this policy stretch, e.g. the cube pushed away from the target). A person does not hand back after a fixed
  time: they drive until the scene is back on track (progress ``handback_progress`` better than at the take-over)
  for at least ``min_takeover_s``, or give up after ``max_takeover_s``.
* **A verdict at the end.** When the person sees the task done (the task's own success test on the delayed
  state), they press SUCCESS, except in ``verdict_miss`` of episodes where they miss it (the episode then runs to
  its time limit and counts as not successful).
* **Label queries** (``label``): answers "was this a success?" for at most ``label_budget`` queries, each wrong
  with probability ``label_error``, each costing ``label_s`` of the person's time; beyond the budget it answers
  None. The classifier's label rounds ask here.

The human side is reported as a person feels it (``report``): intervention rate, take-overs per episode and
operator minutes (time driving + time labelling). All randomness comes from one ``numpy`` generator seeded by
``seed``, so a benchmark run is reproducible.
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np
import torch
from robot_rl.envs.arm.constants import CUBE_HALF, LIFT_MARGIN, STATE_DIM, STATE_LAYOUT, SUCCESS_RADIUS
from robot_rl.envs.arm.experts import ScriptedExpert

from .base import Event, Teleop, TeleopCommand
from .scripted import _task_name, task_progress

_L = STATE_LAYOUT
_DRIFT_TAU_S = 1.0  # the drift's correlation time


def task_success(task: str, state: np.ndarray) -> bool:
    """The arm task's success test (``ArmTask.score``) on a 29-number state: what a person sees as done."""
    s = np.asarray(state, dtype=np.float64).reshape(-1)
    name = _task_name(task)
    if name == "reach":
        return bool(np.linalg.norm(s[_L["target_rel_ee"]]) < SUCCESS_RADIUS[name])
    if name == "push":
        return bool(np.linalg.norm(s[_L["target_rel_cube"]][:2]) < SUCCESS_RADIUS[name])
    lifted = s[_L["cube_pos"]][2] > CUBE_HALF + LIFT_MARGIN
    return bool(lifted and np.linalg.norm(s[_L["target_rel_cube"]]) < SUCCESS_RADIUS[name])


class SimulatedPerson(Teleop):
    """A seeded model of a person correcting a policy on an arm task (module docstring).

    Args:
        task: ``reach``, ``push``, ``pick_place`` or an ``arm:`` spec.
        mode: ``takeover`` (watches the policy and corrects it) or ``always`` (records demonstrations).
        seed: seed of every random choice.
        control_hz: the robot's control rate, to turn seconds into reads.
        reaction_s, noise, drift, gain_range, patience_s, min_progress, failing_margin, handback_progress,
        min_takeover_s, max_takeover_s, verdict_miss, label_budget, label_error, label_s: see the module
            docstring.

    Counters (cumulative): ``reads``, ``active_reads``, ``takeovers``, ``episodes``, ``labels``.
    """

    def __init__(
        self,
        task: str,
        mode: str = "takeover",
        seed: int | None = 0,
        control_hz: float = 20.0,
        reaction_s: float = 0.3,
        noise: float = 0.1,
        drift: float = 0.15,
        gain_range: tuple[float, float] | list[float] = (0.6, 1.0),
        patience_s: float = 1.0,
        min_progress: float = 0.005,
        failing_margin: float = 0.03,
        handback_progress: float = 0.03,
        min_takeover_s: float = 0.75,
        max_takeover_s: float = 4.0,
        verdict_miss: float = 0.05,
        label_budget: int = 200,
        label_error: float = 0.02,
        label_s: float = 3.0,
    ) -> None:
        if mode not in ("always", "takeover"):
            raise ValueError(f"unknown mode {mode!r}; choose one of always, takeover")
        checks = {
            "control_hz": control_hz > 0, "reaction_s": reaction_s >= 0, "noise": noise >= 0, "drift": drift >= 0,
            "patience_s": patience_s > 0, "min_progress": min_progress >= 0, "failing_margin": failing_margin > 0,
            "handback_progress": handback_progress >= 0, "label_budget": label_budget >= 0, "label_s": label_s >= 0,
            "min_takeover_s/max_takeover_s": 0 < min_takeover_s <= max_takeover_s,
            "gain_range": len(gain_range) == 2 and 0 < gain_range[0] <= gain_range[1],
            "verdict_miss": 0 <= verdict_miss <= 1, "label_error": 0 <= label_error <= 0.5,
        }
        bad = [k for k, ok in checks.items() if not ok]
        if bad:
            raise ValueError(f"SimulatedPerson: out of range: {', '.join(bad)} (see robot_rl.real.teleop.person)")
        self.task, self.mode, self.hz = _task_name(task), mode, float(control_hz)
        reads = lambda seconds: max(1, round(seconds * self.hz))  # noqa: E731
        self.delay = round(reaction_s * self.hz)
        self.patience, self.min_reads, self.max_reads = reads(patience_s), reads(min_takeover_s), reads(max_takeover_s)
        self.noise, self.drift, self.gain_range = float(noise), float(drift), (float(gain_range[0]), float(gain_range[1]))
        self.min_progress, self.failing_margin = float(min_progress), float(failing_margin)
        self.handback_progress, self.verdict_miss = float(handback_progress), float(verdict_miss)
        self.label_budget, self.label_error, self.label_s = int(label_budget), float(label_error), float(label_s)
        self.rng = np.random.default_rng(seed)
        self.expert = ScriptedExpert(self.task, num_envs=1, noise=0.0, seed=seed)
        self._drift_keep = float(np.exp(-1.0 / (_DRIFT_TAU_S * self.hz)))
        self.reads = self.active_reads = self.takeovers = self.episodes = self.labels = 0
        self.reset()
        self.episodes = 0

    def reset(self) -> None:
        """A new episode: the person's view, the policy's record and any take-over start afresh."""
        self.expert.reset()
        self.episodes += 1
        self._seen: deque[np.ndarray] = deque(maxlen=self.delay + 1)
        self._best, self._stalled, self._driving, self._gain = np.inf, 0, 0, 1.0
        self._at_takeover = np.inf
        self._drift = np.zeros(4)
        self._verdict_given = False
        self._will_miss = bool(self.rng.random() < self.verdict_miss)

    def _take_over(self, progress: float) -> None:
        self.takeovers += 1
        self._driving, self._at_takeover = 1, progress
        self._gain = float(self.rng.uniform(*self.gain_range))

    def _decide(self, progress: float) -> bool:
        """Whether the person drives on this read, from the progress they see now."""
        if self._driving:
            recovered = progress < self._at_takeover - self.handback_progress and self._driving >= self.min_reads
            if recovered or self._driving >= self.max_reads:
                self._driving, self._best, self._stalled = 0, np.inf, 0  # hand back: a fresh record for the policy
                return False
            self._driving += 1
            return True
        if progress < self._best - self.min_progress:
            self._best, self._stalled = progress, 0
        else:
            self._stalled += 1
        if self._stalled >= self.patience or progress > self._best + self.failing_margin:
            self._take_over(progress)
            return True
        return False

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """The person's command for the robot's latest ``state`` (29 numbers); decisions on the state ``reaction_s`` ago."""
        if state is None:
            raise ValueError("SimulatedPerson.read() needs the robot state: the person watches the scene")
        s = np.asarray(state, dtype=np.float32).reshape(-1)
        if s.shape != (STATE_DIM,):
            raise ValueError(f"expected an arm state of {STATE_DIM} numbers, got shape {np.shape(state)}")
        self._seen.append(s.copy())
        seen = self._seen[0]  # the oldest kept: reaction_s ago (or the episode's first state, early on)
        expert = self.expert.act(torch.from_numpy(s[None].copy()))[0].numpy().astype(np.float64)
        active = True if self.mode == "always" else self._decide(task_progress(self.task, seen))
        self._drift = self._drift_keep * self._drift + np.sqrt(1 - self._drift_keep**2) * self.drift * \
            self.rng.standard_normal(4)
        action = expert * (self._gain if self.mode == "takeover" else 1.0) + self._drift + \
            self.noise * self.rng.standard_normal(4)
        events: frozenset[Event] = frozenset()
        if not self._verdict_given and task_success(self.task, seen):
            self._verdict_given = True
            if not self._will_miss:
                events = frozenset({Event.SUCCESS})
        self.reads += 1
        self.active_reads += int(active)
        return TeleopCommand(action=np.clip(action, -1.0, 1.0).astype(np.float32), active=active, events=events)

    def label(self, success: bool) -> bool | None:
        """The person's answer to "was this episode (or frame) a success?" given the truth ``success``: wrong
        with probability ``label_error``; None once ``label_budget`` answers are spent."""
        if self.labels >= self.label_budget:
            return None
        self.labels += 1
        return bool(success) != bool(self.rng.random() < self.label_error)

    def report(self) -> dict[str, Any]:
        """The human side of a run: intervention rate, take-overs per episode, operator minutes."""
        driving_min = self.active_reads / self.hz / 60.0
        return {
            "intervention_rate": self.active_reads / max(self.reads, 1),
            "takeovers_per_episode": self.takeovers / max(self.episodes, 1),
            "operator_minutes": driving_min + self.labels * self.label_s / 60.0,
            "driving_minutes": driving_min,
            "labels": self.labels,
            "episodes": self.episodes,
        }
