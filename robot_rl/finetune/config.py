"""The typed configuration of `robot-rl finetune` for fine-tuning a saved BC policy (residual RL, DSRL,
ReinFlow, DPPO, RL-100's gated offline rounds). Hydra composes configs/finetune.yaml and a preset of configs/finetune/ over this schema;
every key is named and checked, as for `robot-rl train`."""

from __future__ import annotations

from dataclasses import dataclass, field

from robot_rl.agents.sac import SACConfig
from robot_rl.config import EnvConfig, RunConfig
from robot_rl.fields import help_field as _help
from robot_rl.finetune.dsrl import DSRLConfig
from robot_rl.finetune.ppo import PPOConfig
from robot_rl.finetune.residual import ResidualConfig
from robot_rl.finetune.rl100 import RL100Config

METHODS = ("residual", "dsrl", "reinflow", "dppo", "rl100")


@dataclass
class ReinFlowConfig:
    num_steps: int = _help(4, "K, Euler integration steps of the flow, each with learned noise (1-4)")
    min_std: float = _help(0.08, "lower bound of the injected noise's std (normalised action space)")
    max_std: float = _help(0.24, "upper bound of the injected noise's std")
    noise_hidden: list[int] = _help([128, 128], "hidden widths of the noise network")

    def validate(self) -> None:
        if not 1 <= self.num_steps <= 10:
            raise ValueError("reinflow.num_steps must be between 1 and 10")
        if not 0.0 < self.min_std <= self.max_std:
            raise ValueError("reinflow.min_std and max_std must satisfy 0 < min_std <= max_std")


@dataclass
class DPPOConfig:
    ft_steps: int = _help(2, "last DDIM steps that are stochastic and fine-tuned (earlier ones stay frozen)")
    num_inference_steps: int | None = _help(None, "DDIM steps of the chain (default: the base policy's)")
    min_std: float = _help(0.1, "noise floor of the fine-tuned steps' std (normalised action space)")

    def validate(self) -> None:
        if self.ft_steps < 1:
            raise ValueError("dppo.ft_steps must be >= 1")
        if self.num_inference_steps is not None and self.num_inference_steps < self.ft_steps:
            raise ValueError("dppo.num_inference_steps must be >= dppo.ft_steps")
        if self.min_std <= 0:
            raise ValueError("dppo.min_std must be > 0")


@dataclass
class FinetuneConfig(RunConfig):
    GROUPS = ("env", "finetune")  # preset groups: env=<configs/env preset>, finetune=<configs/finetune preset>

    method: str = _help("residual", "fine-tuning method: residual, dsrl, reinflow, dppo or rl100")
    base_policy: str = _help("", "the BC policy to start from: a policy directory written by robot-rl bc")
    steps: int = _help(50_000, "executed environment steps (actions, summed over envs) to fine-tune for (rl100: "
                               "unused, its length is rl100.rounds)")
    eval_every: int = _help(5_000, "evaluate and checkpoint every this many executed env steps (rl100: every round)")
    replay_capacity: int = _help(1_000_000, "replay size in transitions (residual, dsrl)")
    data: str | None = _help(None, "residual: demonstrations (dataset dir) for a prior buffer sampled 50/50; rl100: the "
                                   "demos the base was trained on, the first rows of its growing dataset")
    env: EnvConfig = field(default_factory=EnvConfig)
    agent: SACConfig = field(default_factory=SACConfig)
    residual: ResidualConfig = field(default_factory=ResidualConfig)
    dsrl: DSRLConfig = field(default_factory=DSRLConfig)
    ppo: PPOConfig = field(default_factory=PPOConfig)
    reinflow: ReinFlowConfig = field(default_factory=ReinFlowConfig)
    dppo: DPPOConfig = field(default_factory=DPPOConfig)
    rl100: RL100Config = field(default_factory=RL100Config)

    def validate(self) -> None:
        checks = [
            (self.method in METHODS, f"method must be one of {', '.join(METHODS)}"),
            (self.env.reward_classifier is None,
             "env.reward_classifier is read by robot-rl train (and finetune from data), not by method= fine-tuning"),
            (self.env.end_on_task_success,
             "env.end_on_task_success is read by robot-rl train (and finetune from data), not by method= fine-tuning"),
            (bool(self.base_policy), "base_policy=<policy dir> is required (robot-rl bc writes <run_dir>/policy)"),
            (self.steps >= 1, "steps must be >= 1"),
            (self.eval_every >= 1, "eval_every must be >= 1"),
            (self.env.num_envs >= 1, "env.num_envs must be >= 1"),
            (self.env.num_eval_envs >= 1, "env.num_eval_envs must be >= 1"),
            (self.env.action_repeat == 1, "env.action_repeat must be 1: the base policy was trained without it"),
            (self.replay_capacity >= self.env.num_envs, "replay_capacity must be >= env.num_envs"),
            (self.data is None or self.method in ("residual", "rl100"),
             "data= (demos) is used by method=residual and method=rl100 only"),
            *self.run_checks(),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        if self.method in ("residual", "dsrl"):
            self.agent.validate()
        section = {"residual": self.residual, "dsrl": self.dsrl, "reinflow": self.reinflow, "dppo": self.dppo,
                   "rl100": self.rl100}
        section[self.method].validate()
        if self.method in ("reinflow", "dppo"):
            self.ppo.validate()
