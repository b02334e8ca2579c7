"""Jump-start RL (JSRL, Uchendu et al. 2023): a guide policy acts for the first steps of every training episode and
the learner for the rest, the handover moving earlier as the learner succeeds.

Why: on a sparse task with few demos, the learner's own episodes rarely reach the reward, so RL has no signal.
With a guide (the task's scripted expert, a BC policy, an earlier run's exported policy) driving the first
`horizon` steps, the learner starts close to the goal, where its own actions find the reward; as it does, the
horizon shrinks until the learner acts from the first step (horizon 0), which is the policy evaluated and
deployed. Every transition, the guide's included, goes into the replay, as in JSRL.

The curriculum (JSRL's "curriculum" variant): at stage 0 the guide drives whole episodes; its first `window`
episodes set the reference score and the guide's mean episode length L, and stages 1..`stages` hand over at
horizons evenly spaced from L down to 0. Spacing from L rather than from the time limit matters where episodes end
at success: an expert that pushes the object home in 40 of 100 steps made the first half of the stages pass
without the learner acting at all. The score of a finished training episode is its success where the task reports
one, else its return. The run moves to the next stage once the mean score of the last `window` episodes at the current stage reaches the reference within
`tolerance` (`reference - |reference| * (1 - tolerance)`). The stage is logged as `jsrl_horizon` with every
evaluation and saved in checkpoints.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from robot_rl.fields import help_field as _help

__all__ = ["JumpStart", "JumpStartConfig", "make_guide"]

Act = Callable[[dict[str, Tensor]], Tensor]


@dataclass
class JumpStartConfig:
    guide: str | None = _help(
        None, "JSRL's guide policy for the first steps of each training episode: expert (the arm task's scripted "
        "expert; on a camera task it steers by the simulator's state, a privileged guide) or a saved policy directory "
        "(robot-rl bc, robot-rl export); null: off")
    stages: int = _help(10, "horizons from the episode length down to 0, evenly spaced (jsrl.guide)")
    window: int = _help(20, "finished training episodes whose mean score decides a stage (jsrl.guide)")
    tolerance: float = _help(0.9, "move on when the window's score reaches this fraction of the guide's (jsrl.guide)")

    def checks(self) -> list[tuple[bool, str]]:
        return [(self.stages >= 1, "jsrl.stages must be >= 1"), (self.window >= 1, "jsrl.window must be >= 1"),
                (0.0 < self.tolerance <= 1.0, "jsrl.tolerance must be in (0, 1]")]


class JumpStart:
    """The guide, the per-env step counts and the curriculum of one training run (module docstring)."""

    def __init__(self, cfg: JumpStartConfig, guide: Act, guide_reset: Callable[[Tensor], None], num_envs: int,
                 episode_steps: int, device: torch.device | str = "cpu") -> None:
        self.cfg, self.guide, self.guide_reset = cfg, guide, guide_reset
        self.horizons = [round(episode_steps * (1 - k / cfg.stages)) for k in range(cfg.stages)] + [0]
        self.guide_lengths: list[int] = []  # stage 0's episode lengths, until the reference is set
        self.stage = 0
        self.steps = torch.zeros(num_envs, dtype=torch.long, device=device)  # each env's step in its episode
        self.scores: deque[float] = deque(maxlen=cfg.window)
        self.reference: float | None = None

    @property
    def horizon(self) -> int:
        return self.horizons[self.stage]

    def act(self, obs: dict[str, Tensor], action: Tensor) -> Tensor:
        """`action` (the learner's, [N, A]) with the guide's in the envs still within the horizon. The guide is
        called on every step of every env, so a scripted guide's per-episode state stays in step."""
        guide_action = self.guide(obs).to(action.device)
        guided = (self.steps < self.horizon).to(action.device)
        return torch.where(guided.unsqueeze(-1), guide_action, action)

    def step(self, done: Tensor, score: Tensor) -> None:
        """After an env step: count it, and for the envs whose episode ended (`done`), record `score` and reset."""
        self.steps += 1
        if not bool(done.any()):
            return
        done = done.to(self.steps.device)
        if self.reference is None:
            self.guide_lengths += self.steps[done].tolist()
        self.steps[done] = 0
        self.guide_reset(done)
        for value in score[done].tolist():
            self.scores.append(float(value))
            self._maybe_advance()

    def _maybe_advance(self) -> None:
        if len(self.scores) < self.cfg.window or self.stage == len(self.horizons) - 1:
            return
        mean = sum(self.scores) / len(self.scores)
        if self.reference is None:  # stage 0: the guide drove whole episodes
            self.reference = mean
            length = sum(self.guide_lengths) / len(self.guide_lengths)
            stages = self.cfg.stages
            self.horizons = self.horizons[:1] + [round(length * (1 - k / stages)) for k in range(1, stages)] + [0]
        if mean >= self.reference - abs(self.reference) * (1.0 - self.cfg.tolerance):
            self.stage += 1
            self.scores.clear()

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "reference": self.reference, "scores": list(self.scores),
                "horizons": list(self.horizons)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.stage, self.reference = int(state["stage"]), state["reference"]
        self.horizons = [int(h) for h in state.get("horizons", self.horizons)]  # absent in checkpoints before
        self.scores = deque(state["scores"], maxlen=self.cfg.window)


def make_guide(cfg: JumpStartConfig, env: Any, seed: int, device: str) -> tuple[Act, Callable[[Tensor], None]]:
    """(act, reset(done)) of `jsrl.guide` on `env`, or a one-line error naming the key."""
    from robot_rl.errors import UserError

    assert cfg.guide is not None
    if cfg.guide == "expert":
        if not env.spec.startswith("arm:"):
            raise UserError(f"jsrl.guide=expert: {env.spec} has no scripted expert (the arm: tasks do); give a "
                            "saved policy directory instead")
        from robot_rl.envs.arm.experts import make_expert

        privileged = any(k == "pixels" or k.startswith("pixels/") for k in env.observation_spec)
        expert = make_expert(env.spec, env.num_envs, noise=0.0, seed=seed, device=env.device, privileged=privileged)
        act = (lambda obs: expert.act(env.privileged_state())) if privileged else expert.act
        return act, expert.reset
    from robot_rl.export import check_task
    from robot_rl.policies.io import PolicyFormatError, load_policy

    try:
        check_task(cfg.guide, env.spec, False)
        policy = load_policy(cfg.guide, device=device)
    except (PolicyFormatError, ValueError) as e:
        raise UserError(f"jsrl.guide={cfg.guide}: {e}") from e
    policy.reset()
    return (lambda obs: policy.act(obs, deterministic=True)), policy.reset
