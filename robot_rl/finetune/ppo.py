"""PPO over action-chunk decisions, for fine-tuning chunked flow and diffusion policies (ReinFlow, DPPO).

A chain policy turns a state into an executed action chunk through a short stochastic chain (ReinFlow: flow
integration steps with learned noise; DPPO: the last DDIM denoising steps with a noise floor). Every
transition k -> k+1 of that chain is Gaussian, so the log-density of the recorded chain is exact, and PPO can
treat the whole chain as the "action" of one decision. This file is the whole algorithm, top to bottom:

1. Rollout. `ChunkRunner` plays `rollout_steps` executed actions in every env. Before each step it names the
   envs whose chunk is used up (or whose episode just ended); only those envs are sampled, so the chain runs
   once per executed chunk. A decision is stored with its chain latents and their log-probs; it comes back
   as a macro transition (obs, discounted reward of the k executed actions, discount gamma^k or 0 on
   termination, next obs) once its chunk is played out or its episode ends. Chunks still playing when the
   iteration ends carry over: they complete in the next iteration with the log-prob of the policy that
   sampled them, which is exactly what the PPO importance ratio needs (they are one update off-policy, and
   the clip bounds that).
2. Advantages. GAE over each env's macro transitions in completion order, with the current critic:
   delta_j = R_j + discount_j V(next_obs_j) - V(obs_j) and A_j = delta_j + discount_j lambda^k_j A_{j+1}.
   `gamma` and `gae_lambda` are both per executed env step, so a chunk of k steps decays by (gamma lambda)^k
   and the effective horizon does not change with `execute`. The recursion stops at episode ends
   (termination: discount is 0; truncation: the delta already bootstraps from the final observation) and at
   an env's last completed macro step of the batch, which V(next_obs) bootstraps. Returns = A + V.
   Values are recomputed for the whole batch rather than stored at decision time, so the carried-over
   chunks use the same critic as the others.
3. Update. `epochs` passes over shuffled minibatches of decisions. `ratio="joint"` (ReinFlow) uses one ratio
   per decision from the summed chain log-prob; `ratio="per_step"` (DPPO) makes every chain transition its
   own clipped PPO term with the decision's advantage, the clip shrinking towards the noisy start of the
   chain: c_k = clip / clip_growth^(S-1-k) (k = 0 is the first recorded transition, k = S-1 produces the
   executed chunk, which gets `clip`). The critic regresses the returns. For the first
   `critic_warmup_iterations` only the critic trains, so a random critic does not wreck the BC actor.
   Updates stop early once the approximate KL (mean of (r - 1) - log r) exceeds `target_kl`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from robot_rl import envs
from robot_rl.fields import help_field as _help
from robot_rl.finetune.chunks import ChunkRunner, MacroStep
from robot_rl.policies.chunking import ActionChunker
from robot_rl.policies.mlp import mlp
from robot_rl.runner import MethodDefaults


@dataclass
class PPOConfig:
    """PPO over chain decisions; defaults are a conservative fine-tuning setup."""

    rollout_steps: int = _help(200, "executed env steps per env per iteration")
    gamma: float = _help(0.99, "discount per executed env step")
    gae_lambda: float = _help(0.95, "GAE lambda per executed env step (a chunk of k steps uses lambda^k)")
    epochs: int = _help(5, "passes over the rollout per iteration")
    minibatch_size: int = _help(256, "decisions (macro steps) per gradient step")
    actor_lr: float = _help(1e-4, "chain policy learning rate (fine-tuning: 3e-5 to 1e-4)")
    critic_lr: float = _help(1e-3, "value network learning rate")
    clip: float = _help(0.05, "PPO ratio clip (DPPO about 0.01, ReinFlow 0.01-0.05)")
    clip_growth: float = _help(1.0, "per_step: clip of chain step k is clip / clip_growth^(S-1-k); 1 = same")
    ratio: str = _help("joint", "'joint' (ReinFlow: one ratio per chain) or 'per_step' (DPPO: one per step)")
    value_clip: float | None = _help(None, "clip value updates around the rollout values (None: plain MSE)")
    max_grad_norm: float = _help(1.0, "gradient norm clip, actor and critic separately")
    target_kl: float | None = _help(None, "stop the iteration's updates once approx KL exceeds this (None: off)")
    per_dim_ratio: bool = _help(
        False,
        "average the log-ratio over the chunk's H*A dimensions (and, joint, over the chain's steps) instead of "
        "summing: a per-dimension ratio that the clip can bound when the chain is high-dimensional and narrow "
        "(ReinFlow's and DPPO's normalised log-probabilities)",
    )
    entropy_coef: float = _help(0.0, "weight of the chain entropy bonus")
    critic_hidden: list[int] = _help([256, 256], "hidden widths of the value network")
    critic_warmup_iterations: int = _help(0, "first iterations that train only the critic")
    normalize_advantages: bool = _help(True, "standardise advantages over the rollout")
    reward_scale: float = _help(1.0, "multiply rewards by this for learning (reported returns are unscaled)")
    eval_deterministic: bool = _help(True, "evaluate with the deterministic chain")

    def validate(self) -> None:
        """Raise ValueError naming the first bad field."""
        checks = [
            (self.rollout_steps >= 1, "ppo.rollout_steps must be >= 1"),
            (0.0 < self.gamma <= 1.0, "ppo.gamma must be in (0, 1]"),
            (0.0 <= self.gae_lambda <= 1.0, "ppo.gae_lambda must be in [0, 1]"),
            (self.epochs >= 1, "ppo.epochs must be >= 1"),
            (self.minibatch_size >= 1, "ppo.minibatch_size must be >= 1"),
            (self.actor_lr > 0, "ppo.actor_lr must be > 0"),
            (self.critic_lr > 0, "ppo.critic_lr must be > 0"),
            (self.clip > 0, "ppo.clip must be > 0"),
            (self.clip_growth >= 1.0, "ppo.clip_growth must be >= 1"),
            (self.ratio in ("joint", "per_step"), "ppo.ratio must be 'joint' or 'per_step'"),
            (self.value_clip is None or self.value_clip > 0, "ppo.value_clip must be None or > 0"),
            (self.max_grad_norm > 0, "ppo.max_grad_norm must be > 0"),
            (self.target_kl is None or self.target_kl > 0, "ppo.target_kl must be None or > 0"),
            (self.entropy_coef >= 0, "ppo.entropy_coef must be >= 0"),
            (len(self.critic_hidden) >= 1 and all(h > 0 for h in self.critic_hidden),
             "ppo.critic_hidden must be a non-empty list of positive widths"),
            (self.critic_warmup_iterations >= 0, "ppo.critic_warmup_iterations must be >= 0"),
            (self.reward_scale > 0, "ppo.reward_scale must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


def macro_gae(
    env_ids: Tensor, delta: Tensor, discount: Tensor, length: Tensor, ended: Tensor, lam: float
) -> Tensor:
    """GAE over macro steps given in completion order (rows of one env are chronological).

    A_j = delta_j + discount_j * lam^length_j * A_next, where A_next is the env's next row, or 0 when row j
    ended its episode or is the env's last row. A backward scan over Python floats: cheap for thousands of rows.
    """
    coef = (discount * lam ** length.to(discount.dtype) * (~ended).to(discount.dtype)).tolist()
    ids, d = env_ids.tolist(), delta.tolist()
    adv, carry = [0.0] * len(d), {}
    for j in reversed(range(len(d))):
        adv[j] = carry[ids[j]] = d[j] + coef[j] * carry.get(ids[j], 0.0)
    return torch.tensor(adv, dtype=delta.dtype, device=delta.device)


def clipped_surrogate(
    new_log_prob: Tensor, old_log_prob: Tensor, adv: Tensor, clip: Tensor, joint: bool, per_dim: int | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """PPO loss from chain log-probs [B, S]; `clip` is [S] (per_step, c_k per transition) or a scalar (joint).
    `per_dim` = D averages the log-ratio over D dimensions per step (and over the steps when joint).

    Returns (loss, approx_kl, clip_fraction); the last two are detached.
    """
    log_ratio = new_log_prob - old_log_prob
    if per_dim:
        log_ratio = log_ratio / per_dim
    if joint:
        log_ratio = log_ratio.mean(-1) if per_dim else log_ratio.sum(-1)  # one ratio per decision
    else:
        adv = adv[:, None]  # every chain transition is a sample with its decision's advantage
    ratio = log_ratio.exp()
    surrogate = torch.min(ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv)
    with torch.no_grad():
        approx_kl = ((ratio - 1) - log_ratio).mean()
        clip_fraction = ((ratio - 1).abs() > clip).float().mean()
    return -surrogate.mean(), approx_kl, clip_fraction


class PPO(MethodDefaults):
    """A chain policy, its value critic, their optimisers and the chunk runner over `env`."""

    def __init__(
        self, cfg: PPOConfig, chain_policy: Any, env: envs.BatchedEnv, seed: int, device: str | torch.device = "cpu"
    ) -> None:
        cfg.validate()
        self.cfg, self.chain_policy, self.env = cfg, chain_policy, env
        self.device = torch.device(device)
        self.value = mlp(chain_policy.obs_dim, 1, cfg.critic_hidden).to(self.device)
        self.actor_params = list(chain_policy.policy_parameters())
        self.actor_opt = torch.optim.Adam(self.actor_params, lr=cfg.actor_lr)
        self.critic_opt = torch.optim.Adam(self.value.parameters(), lr=cfg.critic_lr)
        self.runner = ChunkRunner(env, chain_policy.execute, cfg.gamma)
        self.runner.reset(seed)
        self.rng = torch.Generator().manual_seed(seed)  # minibatch shuffling
        self.iteration = 0
        k = torch.arange(chain_policy.num_chain_steps, device=self.device, dtype=torch.float)
        growth = cfg.clip_growth ** (chain_policy.num_chain_steps - 1 - k)  # c_k = clip / growth^(S-1-k)
        self.clip = torch.tensor(cfg.clip, device=self.device) if cfg.ratio == "joint" else cfg.clip / growth
        self.per_dim = chain_policy.horizon * chain_policy.action_dim if cfg.per_dim_ratio else None
        self._ep_success = torch.zeros(env.num_envs, dtype=torch.bool, device=env.device)

    def start(self, seed: int) -> None:
        """Start fresh episodes in every env (`__init__` already did so with its seed); planned chunks are dropped."""
        self.runner.reset(seed)
        self._ep_success.zero_()

    @property
    def env_steps(self) -> int:
        return self.runner.env_steps

    @property
    def decisions(self) -> int:
        return self.runner.decisions

    def _v(self, obs: Tensor) -> Tensor:
        return self.value(obs.to(self.device)).squeeze(-1)

    # -- 1. rollout -----------------------------------------------------------------------------------------
    @torch.no_grad()
    def _rollout(self) -> tuple[list[MacroStep], list[float], list[float] | None]:
        macros, returns, successes = [], [], None
        for _ in range(self.cfg.rollout_steps):
            ids = self.runner.need_ids()
            if ids.numel():
                sample = self.chain_policy.sample(self.runner.state[ids].to(self.device))
                self.runner.plan(ids, sample.chunk, {"chain": sample.chain, "log_prob": sample.log_prob})
            result = self.runner.step()
            if result.macro is not None:
                macros.append(result.macro)
            if result.success is not None:
                successes = [] if successes is None else successes
                self._ep_success |= result.success
            if bool(result.done.any()):
                returns += result.episode_return[result.done].tolist()
                if result.success is not None:
                    successes += self._ep_success[result.done].float().tolist()
                    self._ep_success &= ~result.done
        return macros, returns, successes

    # -- 2. advantages --------------------------------------------------------------------------------------
    @torch.no_grad()
    def _batch(self, macros: list[MacroStep]) -> dict[str, Tensor]:
        cat = lambda name: torch.cat([getattr(m, name) for m in macros]).to(self.device)  # noqa: E731
        obs, next_obs = cat("obs"), cat("next_obs")
        value, next_value = self._v(obs), self._v(next_obs)
        discount = cat("discount")
        delta = self.cfg.reward_scale * cat("reward") + discount * next_value - value
        ended = cat("terminated") | cat("truncated")
        adv = macro_gae(cat("env_ids"), delta, discount, cat("length"), ended, self.cfg.gae_lambda)
        chain = torch.cat([m.payload["chain"] for m in macros]).to(self.device)
        log_prob = torch.cat([m.payload["log_prob"] for m in macros]).to(self.device)
        return {"obs": obs, "chain": chain, "log_prob": log_prob, "adv": adv, "ret": adv + value, "value": value}

    # -- 3. update ------------------------------------------------------------------------------------------
    def advance(self) -> dict[str, float | Tensor]:
        """One iteration: collect `rollout_steps` executed steps per env, compute advantages, update.

        Returns float metrics (a metric that is undefined this iteration, e.g. the policy loss during the
        critic warm-up, is left out rather than NaN, so averages over iterations stay finite) and, like the
        other fine-tuning methods, one value per finished episode: `episode_return` [E] and, where the task
        reports success, `success` [E] (1.0 if the episode succeeded at any step).
        """
        start = time.perf_counter()
        macros, ep_returns, ep_successes = self._rollout()
        metrics: dict[str, float | Tensor] = {}
        if macros:
            metrics.update(self._update(self._batch(macros)))
        self.iteration += 1
        metrics.update(macro_steps=float(sum(m.env_ids.numel() for m in macros)),
                       iteration_time_s=time.perf_counter() - start, episode_return=torch.tensor(ep_returns))
        if ep_successes is not None:
            metrics["success"] = torch.tensor(ep_successes)
        return metrics

    def _update(self, b: dict[str, Tensor]) -> dict[str, float]:
        cfg = self.cfg
        train_actor = self.iteration >= cfg.critic_warmup_iterations
        adv = b["adv"]
        if cfg.normalize_advantages and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        n = adv.numel()
        sums: dict[str, Tensor] = {}
        steps, stop = 0, False
        for _ in range(cfg.epochs):
            perm = torch.randperm(n, generator=self.rng).to(self.device)
            for mb in perm.split(cfg.minibatch_size):
                obs, ret, old_v = b["obs"][mb], b["ret"][mb], b["value"][mb]
                v = self._v(obs)
                v_loss = (v - ret).pow(2)
                if cfg.value_clip is not None:
                    v_clipped = old_v + (v - old_v).clamp(-cfg.value_clip, cfg.value_clip)
                    v_loss = torch.max(v_loss, (v_clipped - ret).pow(2))
                loss, out = 0.5 * v_loss.mean(), {"value_loss": v_loss.mean()}
                if train_actor:
                    new_lp = self.chain_policy.log_prob(obs, b["chain"][mb])
                    pg, kl, cf = clipped_surrogate(
                        new_lp, b["log_prob"][mb], adv[mb], self.clip, cfg.ratio == "joint", self.per_dim
                    )
                    if cfg.target_kl is not None and kl.item() > cfg.target_kl:
                        stop = True  # as in DPPO: skip this step and end the iteration's updates
                        break
                    loss = loss + pg
                    out.update(policy_loss=pg, approx_kl=kl, clip_fraction=cf)
                    if cfg.entropy_coef > 0:
                        ent = self.chain_policy.entropy(obs, b["chain"][mb]).sum(-1).mean()
                        loss = loss - cfg.entropy_coef * ent
                        out["entropy"] = ent
                self.actor_opt.zero_grad(set_to_none=True)
                self.critic_opt.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.value.parameters(), cfg.max_grad_norm)
                self.critic_opt.step()
                if train_actor:
                    nn.utils.clip_grad_norm_(self.actor_params, cfg.max_grad_norm)
                    self.actor_opt.step()
                for k, x in out.items():
                    sums[k] = sums.get(k, 0.0) + x.detach()  # summed on the device, read back once
                steps += 1
            if stop:
                break
        metrics = {k: float(x) / steps for k, x in sums.items()}
        var = b["ret"].var().item() if n > 1 else 0.0
        if var > 0:
            metrics["explained_variance"] = 1 - (b["ret"] - b["value"]).var().item() / var
        metrics.update(update_steps=float(steps), kl_stopped=float(stop))
        return metrics

    # -- evaluation and checkpoints -------------------------------------------------------------------------
    def eval_policy(self) -> tuple[Callable[[dict[str, Tensor]], Tensor], Callable[[Tensor], None]]:
        """(act, on_done) for `robot_rl.evaluation.evaluate`, over a fresh `ActionChunker`."""
        chunker = ActionChunker(self.chain_policy.horizon, self.chain_policy.execute)

        @torch.no_grad()
        def act(obs: dict[str, Tensor]) -> Tensor:
            state = obs["state"].float().to(self.device)
            plan = lambda: self.chain_policy.sample(state, deterministic=self.cfg.eval_deterministic).chunk  # noqa: E731
            return chunker.act(plan).to(obs["state"].device)

        return act, chunker.reset

    def finish(self, run: Any) -> dict[str, Any]:
        """ReinFlow and DPPO fine-tune the policy itself: save it as a policy directory for deployment."""
        from robot_rl.policies.io import save_policy

        if getattr(self.chain_policy, "first_ft", 0) > 0:
            # DPPO with frozen early steps: a plain DiffusionPolicy would run the fine-tuned network on every step
            run.progress.message("no policy directory: dppo.ft_steps < the DDIM steps (the chain has frozen "
                                 "steps); the fine-tuned chain is in checkpoints/best.pt")
            return {"policy_dir": None}
        path = run.run_dir / "policy"
        save_policy(self.chain_policy.base_policy(), path)
        return {"policy_dir": str(path)}

    def state_dict(self) -> dict[str, Any]:
        """Learner state. The simulator state is not saved: a resumed run starts new episodes."""
        if isinstance(self.chain_policy, nn.Module):
            policy: Any = self.chain_policy.state_dict()
        else:
            policy = [p.detach().clone() for p in self.actor_params]
        return {
            "policy": policy,
            "value": self.value.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "critic_opt": self.critic_opt.state_dict(),
            "iteration": self.iteration,
            "env_steps": self.runner.env_steps,
            "decisions": self.runner.decisions,
            "sampling_rng": self.rng.get_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if isinstance(self.chain_policy, nn.Module):
            self.chain_policy.load_state_dict(state["policy"])
        else:
            with torch.no_grad():
                for p, saved in zip(self.actor_params, state["policy"], strict=True):
                    p.copy_(saved)
        self.value.load_state_dict(state["value"])
        self.actor_opt.load_state_dict(state["actor_opt"])
        self.critic_opt.load_state_dict(state["critic_opt"])
        self.iteration = int(state["iteration"])
        self.runner.env_steps, self.runner.decisions = int(state["env_steps"]), int(state["decisions"])
        self.rng.set_state(state["sampling_rng"] if "sampling_rng" in state else state["rng"])  # "rng": written before the Runner

