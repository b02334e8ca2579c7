"""A deployed policy against the delay it was trained under (`env_delay`, `robot_rl.envs.delay`).

On the robot a client keeps what the simulator kept for the learner: the actions still in flight, which a
delay-aware policy reads after the state (`InFlightActions`), from what the robot executed (the operator's actions
and held ticks included). It also measures the observation-to-action delay the bridge sees (ticks between the
observation a policy step acted on and the tick that applied its action, less one: `Session`'s `executed` hook) and
warns, once early and in the summary, when it differs from the trained one: a policy trained for 5 steps of delay
acting on a robot that applies its actions at once (or a naive policy on a slow link) mis-predicts where the arm is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from robot_rl.api import delay_text
from robot_rl.envs.delay import InFlightActions

EARLY_CHECK_STEPS = 20  # policy steps measured before the first verdict (an episode's start can be slower)


class DeployDelay:
    """The in-flight actions and delay measurement of one deploy (module docstring). `trained`: the policy's
    `delay` metadata (None: trained without delay); `period_s`: the robot's control period; `added_steps`: delay
    the policy's own path adds to what the bridge measures (`deploy policy_server=`: a served chunk's actions are
    for the steps after the one its observation was taken at, `RemotePolicy.lead`)."""

    def __init__(self, trained: dict[str, Any] | None, action_dim: int, period_s: float,
                 say: Callable[[str], None] = print, added_steps: int = 0) -> None:
        self.trained, self.period_s, self.say = trained, period_s, say
        # Steps the policy's path adds before the bridge (a served chunk is for the steps after its observation's).
        self.added_steps = added_steps
        self.flight = InFlightActions(trained, action_dim) if trained else None
        self.extra = self.flight.extra if self.flight is not None else 0
        self.ticks: list[int] = []
        self.warned = False

    def policy(self, act: Callable[[Any], np.ndarray]) -> Callable[[Any], np.ndarray]:
        """`act` on the observation a delay-aware policy reads: the state with the actions in flight appended."""
        if not self.extra:
            return act

        def aware(view: Any) -> np.ndarray:
            if isinstance(view, dict):
                return act({**view, "state": self.flight.observe(view["state"])})
            return act(self.flight.observe(view))

        return aware

    def reset(self) -> None:
        """A new episode: nothing in flight."""
        if self.flight is not None:
            self.flight.reset()

    def executed(self, action: np.ndarray | None, late: int | None) -> None:
        """`Session`'s hook: what the robot executed this step and, for a policy step, its measured delay."""
        if self.flight is not None:
            self.flight.sent(action)
        if late is None:
            return
        self.ticks.append(int(late) + self.added_steps)
        if self.flight is not None and self.flight.sampled:  # the drawn delay's input: what the bridge measures
            self.flight.delay = int(np.median(self.ticks[-50:]))
        if not self.warned and len(self.ticks) >= EARLY_CHECK_STEPS and (line := self.mismatch()) is not None:
            self.warned = True
            self.say(f"warning: {line}")

    def trained_range(self) -> tuple[int, int]:
        choices = [int(v) for v in (self.trained or {}).get("choices") or [0]]
        return min(choices), max(choices)

    def measured(self) -> str:
        """The measured delay in words: median and p95 in steps and milliseconds."""
        if not self.ticks:
            return "no policy steps measured"
        median, p95 = np.median(self.ticks), np.percentile(self.ticks, 95)
        ms = 1000.0 * self.period_s
        return f"median {median:g} steps ({median * ms:.0f} ms), p95 {p95:g} steps over {len(self.ticks)} policy steps"

    def mismatch(self) -> str | None:
        """One line when the measured median delay is outside the trained range, else None."""
        if not self.ticks:
            return None
        low, high = self.trained_range()
        median = float(np.median(self.ticks))
        if low <= median <= high:
            return None
        trained = delay_text(self.trained) if self.trained else "no delay"
        return (f"the bridge's observation-to-action delay is {self.measured()}, the policy was trained with "
                f"{trained}: train it under this delay (robot-rl train env_delay.steps={round(median)} "
                f"env_delay.aware=true, or env_delay.sample_steps=[...] with the measured values)")

    def summary(self) -> str:
        trained = delay_text(self.trained) if self.trained else "no delay"
        verdict = self.mismatch()
        return (f"observation-to-action delay on the bridge: {self.measured()}; trained with {trained}"
                + (" (differs: see the warning)" if verdict else ""))
