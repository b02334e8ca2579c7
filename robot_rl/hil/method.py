"""`HILMethod`: human-in-the-loop training (HIL-SERL) as a `robot_rl.runner.Method`, so `hil-train` runs in the
same skeleton as `train` and `finetune`: the Runner's metrics.csv, TensorBoard, learning curve, progress bar,
checkpoints (`checkpoints/latest.pt`, `best.pt`) and Ctrl-C/SIGTERM handling.

What differs from simulation is only inside the method: one `advance` is one episode on the robot
(`robot_rl.hil.session.Session`, a real-time loop that must not be cut mid-episode), and there is no separate
evaluation, since every robot episode costs robot time: the runner logs the training episodes' return and
success in its place. The learner is `robot_rl.hil.learner.HILLearner`, fed through a link: in this process
(`LocalLink`, whose buffers and agent are checkpointed here) or as a Ray actor (`RayLink`; that learner
checkpoints itself, and the run's checkpoints hold the actor weights the robot ran, which is what `deploy` loads).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import torch

from robot_rl.agents.sac import policy_state_dict
from robot_rl.hil.learner import HILLearner, LearnerConfig, agent_weights
from robot_rl.hil.session import EpisodeStats, Session
from robot_rl.logger import METRIC_COLUMNS
from robot_rl.runner import EvalPolicy, MethodDefaults, Metrics, Runner

__all__ = ["COLUMNS", "HILMethod", "summary_line"]

# the learner's counters (in this process, or as a Ray learner last reported them) and the link's
_LINK_COUNTERS = ("updates", "interventions", "transitions", "prior_size", "dropped_transitions", "weight_syncs",
                  "pending_updates")
# metrics.csv of a hil-train run: "success_rate" and "eval_return_mean" are those of the training episodes
COLUMNS = [*METRIC_COLUMNS, "train_success_rate", "autonomous_success", "intervention_rate", "takeovers",
           "operator_minutes", "episode_length",
           *(c for c in _LINK_COUNTERS if c not in METRIC_COLUMNS), "missed_tick_rate"]

EPISODE_SEED_STRIDE = 100_000  # episode seeds of a run: seed * stride + episode (runs never share starting states)


class HILMethod(MethodDefaults):
    """One robot episode per `advance`; the learner trains as transitions arrive (see the module docstring).

    Args:
        session: the robot loop, with the link, operator and recorder it runs.
        actor: the network `session` acts with (`robot_rl.hil.learner.build_policy`: the actor, or for a camera
            learner actor and encoder); its weights come from the learner through the link.
        cfg: the learner's configuration (dimensions, SAC settings), stored with the actor weights.
        learner: the learner in this process, or None when it runs elsewhere (Ray).
        hold: called when the run is interrupted mid-episode, before anything is saved: the robot holds still.
    """

    def __init__(
        self, session: Session, actor: torch.nn.Module, cfg: LearnerConfig, learner: HILLearner | None, hold: Any
    ) -> None:
        self.session, self.actor, self.cfg, self.learner, self.hold = session, actor, cfg, learner, hold
        self._first_seed = 0
        self._episodes_run = 0  # since start(): the offset of the next episode's seed
        self.operator_steps = 0  # the run's steps driven by the operator (kept in checkpoints): operator minutes
        self.control_hz = session.client.spec().control_hz

    @property
    def env_steps(self) -> int:
        return self.session.env_steps

    @property
    def stopped(self) -> bool:  # type: ignore[override]
        return self.session.estopped

    def start(self, seed: int) -> None:
        self._first_seed, self._episodes_run = seed * EPISODE_SEED_STRIDE, 0

    def advance(self) -> Metrics:
        try:
            stats = self.session.run_episode(self._first_seed + self._episodes_run)
        except KeyboardInterrupt:
            self.hold()  # the robot stops first; the runner saves the checkpoint after
            raise
        self._episodes_run += 1
        self.operator_steps += stats.interventions
        metrics: dict[str, Any] = {
            "episode_return": torch.tensor([stats.ret]),
            "success": torch.tensor([float(stats.success)]),
            "intervention_rate": stats.intervention_rate,
            # what ranks best.pt: an episode the operator completed says nothing about the policy
            "autonomous_success": float(stats.success and stats.interventions == 0),
            "takeovers": float(stats.takeovers),  # the human side, as the person feels it (and operator_minutes)
            "episode_length": float(stats.length),
            # the robot's ticks this loop did not reach (robot_rl.hil.session: the loop was slower than the robot)
            "missed_tick_rate": stats.missed_tick_rate,
        }
        take = getattr(self.session.link, "take_metrics", None)  # the learner's losses and Q (both links)
        if take is not None:
            metrics.update(take())
        return metrics

    def eval_policy(self) -> EvalPolicy:
        raise NotImplementedError("hil-train has no evaluation env: the runner logs the training episodes")

    def log_fields(self) -> dict[str, float | None]:
        stats = self.session.link.stats() if self.session.link is not None else {}
        fields = {k: float(stats[k]) for k in _LINK_COUNTERS if isinstance(stats.get(k), int | float)}
        return {**fields, "operator_minutes": self.operator_steps / self.control_hz / 60.0}  # driven, in all

    def finish(self, run: Runner) -> dict[str, Any]:
        line = summary_line(self.session.episodes)
        run.progress.message(f"{line} | per-episode log {self.session.metrics_path}")
        return {"episodes": len(self.session.episodes), "estopped": self.session.estopped}

    # -- checkpoints --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """`learner` (agent, counters; with a remote learner only the config and the actor's weights) and, for a
        learner in this process, its buffers under `replay` (left out of `best.pt`)."""
        hil = {"env_steps": self.session.env_steps, "operator_steps": self.operator_steps}
        if self.learner is None:
            weights = {k: v.detach().to("cpu", copy=True) for k, v in self.actor.state_dict().items()}
            return {"learner": {"config": asdict(self.cfg), "agent": agent_weights(self.cfg, weights)}, "hil": hil}
        state = self.learner.state_dict()
        replay = {k: state.pop(k) for k in ("online", "prior")}
        return {"learner": state, "replay": replay, "hil": hil}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.session.env_steps = int(state["hil"]["env_steps"])
        self.operator_steps = int(state["hil"].get("operator_steps", 0))
        if self.learner is not None:
            self.learner.load_state_dict({**state["learner"], **state["replay"]})
            self.actor.load_state_dict(self.learner.actor_state())
        else:  # the Ray learner restores itself; until it sends weights, act with the ones the robot last ran
            agent = state["learner"]["agent"]
            self.actor.load_state_dict(policy_state_dict(agent) if self.cfg.cameras else agent["actor"])


def summary_line(episodes: list[EpisodeStats]) -> str:
    """Intervention rate and success of the first and last quarter of the episodes: did the policy take over?"""
    if not episodes:
        return "done: no episodes"
    q = max(1, len(episodes) // 4)
    first, last = episodes[:q], episodes[-q:]

    def rate(eps: list[EpisodeStats]) -> tuple[float, float]:
        steps = sum(e.length for e in eps) or 1
        return sum(e.interventions for e in eps) / steps, sum(e.success for e in eps) / len(eps)

    (i0, s0), (i1, s1) = rate(first), rate(last)
    takeovers = [sum(e.takeovers for e in eps) / len(eps) for eps in (first, last)]
    return (f"done: {len(episodes)} episodes, {episodes[-1].env_steps:,} steps | intervention rate "
            f"{100 * i0:.0f}% (first quarter) -> {100 * i1:.0f}% (last quarter) | take-overs per episode "
            f"{takeovers[0]:.1f} -> {takeovers[1]:.1f} | success {100 * s0:.0f}% -> {100 * s1:.0f}%")
