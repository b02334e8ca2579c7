"""A simulated operator for the arm tasks, driven by the task's scripted expert.

Why: the intervention pipeline (take-over, recording, labelling) has to be exercised end to end without a
person at the keyboard, in tests and in simulated "human-in-the-loop" runs. ``ScriptedTeleop`` plays that
person with ``robot_rl.envs.arm.experts.ScriptedExpert`` (one env), reading the robot state it is given:

* ``mode="always"``: always active; the expert drives every step. This records demonstrations.
* ``mode="takeover"``: the operator watches the policy drive. It tracks the task's progress measure
  (``task_progress``: distances the task's dense reward is built from, lower is better) and, when the best
  value has not improved by ``min_progress`` for ``patience`` consecutive reads, takes over for
  ``takeover_steps`` reads, then hands back and gives the policy a fresh ``patience`` window. This is
  early-stopping patience rather than a step-by-step comparison, so a policy that wobbles but gets closer
  overall is left alone, and one that circles or pushes the cube the wrong way is corrected.

The expert sees every state, also while the policy drives, so its phase machine (push: approach / descend /
push; pick_place: approach / descend / close / carry) follows the scene and it acts sensibly the moment it
takes over, as a human watching would.
"""

from __future__ import annotations

import numpy as np
import torch
from robot_rl.envs.arm.constants import STATE_DIM, STATE_LAYOUT, TASKS
from robot_rl.envs.arm.experts import ScriptedExpert

from .base import Teleop, TeleopCommand

MODES = ("always", "takeover")
_L = STATE_LAYOUT


def task_progress(task: str, state: np.ndarray) -> float:
    """Distance-to-done of an arm task from its 29-D state (metres, lower is better):

    * reach: ``|target_rel_ee|``
    * push: ``|target_rel_cube[:2]| + 0.5 |cube_rel_ee|``
    * pick_place: ``|target_rel_cube| + 0.5 |cube_rel_ee|``

    (the negated dense rewards of ``robot_rl.envs.arm.tasks``).
    """
    s = np.asarray(state, dtype=np.float64).reshape(-1)
    if s.shape != (STATE_DIM,):
        raise ValueError(f"expected an arm state of {STATE_DIM} numbers, got shape {np.shape(state)}")
    if task == "reach":
        return float(np.linalg.norm(s[_L["target_rel_ee"]]))
    reach = 0.5 * float(np.linalg.norm(s[_L["cube_rel_ee"]]))
    if task == "push":
        return float(np.linalg.norm(s[_L["target_rel_cube"]][:2])) + reach
    if task == "pick_place":
        return float(np.linalg.norm(s[_L["target_rel_cube"]])) + reach
    raise ValueError(f"unknown task {task!r}; choose one of {TASKS}")


def _task_name(task: str) -> str:
    """Accept ``"push"`` as well as an env spec like ``"arm:push-sparse"``."""
    name = task.removeprefix("arm:")
    for suffix in ("-pixels", "-sparse"):
        name = name.removesuffix(suffix)
    if name not in TASKS:
        raise ValueError(f"unknown arm task {task!r}; choose one of {TASKS} (or an arm: spec)")
    return name


class ScriptedTeleop(Teleop):
    """Scripted operator for one arm task (see the module docstring).

    Args:
        task: ``"reach"``, ``"push"``, ``"pick_place"`` or an ``arm:`` spec.
        mode: ``"always"`` (demonstrations) or ``"takeover"`` (simulated interventions).
        noise: std of the expert's Gaussian action noise (imperfect operators).
        seed: seed of the expert's noise.
        patience: reads without ``min_progress`` improvement before taking over (``takeover`` mode).
        min_progress: improvement of the progress measure (metres) that counts as progress.
        takeover_steps: reads the operator drives once it has taken over.

    Counters (cumulative over episodes): ``reads``, ``active_reads``, ``takeovers``.
    """

    def __init__(
        self,
        task: str,
        mode: str = "always",
        noise: float = 0.0,
        seed: int | None = 0,
        patience: int = 10,
        min_progress: float = 0.005,
        takeover_steps: int = 20,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose one of {MODES}")
        if patience < 1 or takeover_steps < 1:
            raise ValueError(f"patience and takeover_steps must be >= 1, got {patience} and {takeover_steps}")
        if min_progress < 0:
            raise ValueError(f"min_progress must be >= 0, got {min_progress}")
        self.task = _task_name(task)
        self.mode = mode
        self.patience = int(patience)
        self.min_progress = float(min_progress)
        self.takeover_steps = int(takeover_steps)
        self.expert = ScriptedExpert(self.task, num_envs=1, noise=noise, seed=seed)
        self.reads = 0
        self.active_reads = 0
        self.takeovers = 0
        self._best = np.inf
        self._stalled_reads = 0
        self._takeover_left = 0

    def reset(self) -> None:
        """New episode: forget the progress history, end any take-over, restart the expert's phase machine."""
        self.expert.reset()
        self._best = np.inf
        self._stalled_reads = 0
        self._takeover_left = 0

    @property
    def taking_over(self) -> bool:
        """Whether the operator is currently driving in ``takeover`` mode."""
        return self._takeover_left > 0

    def _watch(self, progress: float) -> bool:
        """Update the take-over state with this read's progress; returns whether the operator drives now."""
        if self._takeover_left > 0:
            self._takeover_left -= 1
            return True
        # The first read of a policy stretch (episode start, or right after a hand-back) only sets the baseline,
        # so the policy always gets `patience` reads of its own before the next take-over.
        if progress < self._best - self.min_progress:
            self._best, self._stalled_reads = progress, 0
        else:
            self._stalled_reads += 1
        if self._stalled_reads < self.patience:
            return False
        self.takeovers += 1
        self._takeover_left = self.takeover_steps - 1  # this read is the first of the take-over
        self._best, self._stalled_reads = np.inf, 0  # forget the policy's history for after the hand-back
        return True

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """The expert's action for ``state`` (a 29-D arm state vector), and whether the operator drives."""
        if state is None:
            raise ValueError(
                "ScriptedTeleop.read() needs the robot state: it drives from what the robot sees"
            )
        s = np.asarray(state, dtype=np.float32).reshape(-1)
        if s.shape != (STATE_DIM,):
            raise ValueError(f"expected an arm state of {STATE_DIM} numbers, got shape {np.shape(state)}")
        action = self.expert.act(torch.from_numpy(s[None].copy()))[0].numpy().astype(np.float32)
        active = True if self.mode == "always" else self._watch(task_progress(self.task, s))
        self.reads += 1
        self.active_reads += int(active)
        return TeleopCommand(action=action, active=active)
