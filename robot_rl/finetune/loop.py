"""`robot-rl finetune method=...`: a fine-tuning method (residual, dsrl, reinflow, dppo) on the Runner.

The method (a `robot_rl.runner.Method`) owns the algorithm; `Finetuner` loads the saved base policy, makes the
envs and the method, and the `robot_rl.runner.Runner` does the rest: an evaluation of the BC starting point at
step 0 and then every `eval_every` executed env steps (ranked by success rate where the task has one),
`metrics.csv`, `learning_curve.png`, checkpoints (`checkpoints/latest.pt` to resume, `checkpoints/best.pt`).
ReinFlow and DPPO save the fine-tuned policy as a policy directory when the run ends (`<run_dir>/policy`,
loadable with `robot_rl.policies.io.load_policy`; `PPO.finish`). RL-100 (`rl100`) runs one gated offline round per
`advance()`, is evaluated after each and ends after `rl100.rounds`; it keeps `<run_dir>/policy` (the accepted policy)
and `<run_dir>/rl100_rounds.json` up to date after every round.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl import envs
from robot_rl.bc import BCError, check_env_dims
from robot_rl.finetune import FinetuneError
from robot_rl.finetune.config import FinetuneConfig
from robot_rl.logger import METRIC_COLUMNS
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import load_policy
from robot_rl.runner import Method, Runner, RunSettings, prepare

COLUMNS = [*METRIC_COLUMNS, "train_success_rate", "policy_loss", "value_loss", "approx_kl", "clip_fraction",
           "explained_variance"]


def build_method(cfg: FinetuneConfig, base: ChunkPolicy, env: envs.BatchedEnv) -> Method:
    """The method object for `cfg.method` around `base` (checked to be the kind the method needs)."""
    if cfg.method == "residual":
        from robot_rl.finetune.residual import ResidualRL
        from robot_rl.prior_data import OfflineData

        demos = None
        if cfg.data:
            demos = OfflineData.load(cfg.data, cfg.agent.critic.gamma, device=cfg.device, cameras=tuple(base.cameras),
                                      env_spec=cfg.env.spec)
            demos.check_fits(base.obs_dim, base.action_dim, f"dataset {cfg.data}", base.cameras)
        return ResidualRL(cfg.residual, cfg.agent, base, env, cfg.replay_capacity, cfg.device, demos)
    if cfg.method == "rl100":
        from robot_rl.finetune.rl100 import RL100

        return RL100(cfg.rl100, base, env, cfg.device, cfg.data, cfg.base_policy)
    if cfg.method == "dsrl":
        from robot_rl.finetune.dsrl import DSRL

        _require(base, (DiffusionPolicy, FlowPolicy), "dsrl steers a diffusion or flow policy's noise")
        return DSRL(cfg.dsrl, cfg.agent, base, env, cfg.replay_capacity, cfg.device)
    from robot_rl.finetune.ppo import PPO

    if cfg.method == "reinflow":
        from robot_rl.finetune.reinflow import ReinFlowChain

        _require(base, (FlowPolicy,), "reinflow fine-tunes a flow policy (robot-rl bc policy=flow)")
        r = cfg.reinflow
        chain = ReinFlowChain(base, r.num_steps, r.min_std, r.max_std, tuple(r.noise_hidden))
    else:
        from robot_rl.finetune.dppo import DPPOChain

        _require(base, (DiffusionPolicy,), "dppo fine-tunes a diffusion policy (robot-rl bc policy=diffusion)")
        chain = DPPOChain(base, cfg.dppo.ft_steps, cfg.dppo.num_inference_steps, cfg.dppo.min_std)
    return PPO(cfg.ppo, chain.to(cfg.device), env, cfg.seed, cfg.device)


def _require(base: ChunkPolicy, kinds: tuple[type, ...], message: str) -> None:
    if not isinstance(base, kinds):
        raise FinetuneError(f"{message}; base_policy is a {type(base).__name__}")


class Finetuner(Runner):
    """Envs, base policy and method of one fine-tuning run, driven by a `robot_rl.runner.Runner`."""

    def __init__(self, cfg: FinetuneConfig, run_dir: Path, resume: bool = False) -> None:
        prepare(cfg)
        self.cfg = cfg
        base = load_policy(cfg.base_policy, device=cfg.device)
        if not isinstance(base, ChunkPolicy):  # an exported SAC, residual or DSRL result has no chunk sampler
            raise FinetuneError(
                f"base_policy {cfg.base_policy} is a {type(base).__name__}; fine-tuning starts from a behaviour-"
                "cloning policy (MLPPolicy, DiffusionPolicy or FlowPolicy: robot-rl bc, ReinFlow, DPPO)"
            )
        if base.cameras and cfg.method not in ("residual", "dsrl"):
            raise FinetuneError(
                f"base_policy {cfg.base_policy} reads cameras ({', '.join(base.cameras)}); {cfg.method} fine-tunes "
                "state policies only: use method=residual or method=dsrl, or train the base with robot-rl bc cameras=[]"
            )
        # a camera base is fine-tuned at the image size it was trained on, whatever env.pixel_size says
        size = tuple(next(iter(base.cameras.values()))[:2] if base.cameras else cfg.env.pixel_size)
        make = dict(device=cfg.device, max_episode_steps=cfg.env.max_episode_steps, pixel_size=size)
        self.env = envs.make(cfg.env.spec, num_envs=cfg.env.num_envs, **make)
        eval_env = envs.make(cfg.env.spec, num_envs=cfg.env.num_eval_envs, **make)
        try:
            check_env_dims(self.env, cfg.env.spec, base.obs_dim, base.action_dim, base.cameras)
        except BCError as e:
            raise FinetuneError(f"base_policy {cfg.base_policy}: {e}") from None
        steps, eval_every, columns = cfg.steps, cfg.eval_every, COLUMNS
        if cfg.method == "rl100":  # one round per advance, evaluated after each; the run ends after rl100.rounds
            from robot_rl.finetune.rl100 import COLUMNS as RL100_COLUMNS

            r = cfg.rl100
            horizon = cfg.env.max_episode_steps or getattr(self.env, "max_episode_steps", None) or 1000
            episodes = -(-r.episodes_per_round // cfg.env.num_envs) * cfg.env.num_envs + cfg.env.num_envs
            steps, eval_every = r.rounds * episodes * horizon, 1
            columns = list(dict.fromkeys([*METRIC_COLUMNS, "train_success_rate", *RL100_COLUMNS]))
        settings = RunSettings(
            steps=steps, eval_every=eval_every, seed=cfg.seed, command="finetune", method=cfg.method,
            title=f"{cfg.method} on {cfg.env.spec}", quiet=cfg.quiet, evaluate_first=True, score="success",
            columns=columns, means_on_host=True,
        )
        super().__init__(build_method(cfg, base, self.env), eval_env, run_dir, cfg, settings, resume=resume)

    def run(self) -> dict[str, Any]:
        return {"policy_dir": None, **super().run()}
