"""DPPO (Ren et al. 2024): PPO over the last steps of a diffusion policy's DDIM denoising chain.

The base `DiffusionPolicy` denoises x_T ~ N(0, I) into the normalised chunk in K DDIM steps (`ddim_step`).
DPPO splits that chain: the first K - S steps run a frozen copy of the base network deterministically
(eta = 0), the last S = `ft_steps` run a trainable copy stochastically,

    x_t' = mean_theta(obs, x_t) + std * z,    z ~ N(0, I),    std = max(sigma_eta(t, t'), min_std),

with mean and sigma from `ddim_step` at `eta` (1: the DDPM-like variance), x0_hat clipped as the base clips
it. Each fine-tuned step is a Gaussian transition with an exact, differentiable log-density; the frozen
prefix does not depend on the trained parameters, so its output (the latent entering the first fine-tuned
step) is recorded as the chain's start and never scored. The std floor matters twice: DDIM's last step has
sigma = 0 (it lands on x0_hat), and tiny stds make PPO ratios explode. Fine-tuning only the last steps keeps
the chain short and the early, coarse denoising intact.

deterministic=True runs every step at eta = 0 with no injected noise, so before any update the chunk equals
the base's `predict_chunk(..., deterministic=True)`; its transitions are still scored under the stochastic
(eta, floored std) Gaussians. The executed chunk is the last latent clipped to the base's clip range,
unnormalised and clamped to [-1, 1].

`base_policy()` is the trainable copy as a plain `DiffusionPolicy`, which runs the fine-tuned network on all K
steps; it reproduces the chain exactly only when ft_steps == K (otherwise its first K - S steps differ from
the frozen ones the chain ran).
"""

from __future__ import annotations

import copy

import torch
from torch import Tensor, nn

from robot_rl.finetune.reinflow import (
    LOG_SQRT_2PI,
    ChainSample,
    check_chain,
    execute_chunk,
    gaussian_log_prob,
    initial_latent,
)
from robot_rl.policies.chunk_policy import Obs
from robot_rl.policies.diffusion import DDIMStep, DiffusionPolicy, ddim_step, ddim_timesteps


class DPPOChain(nn.Module):
    """A `DiffusionPolicy` whose last `ft_steps` DDIM steps are trainable Gaussian transitions (docstring).

    Args:
        base: the pretrained diffusion policy (copied twice: frozen and trainable; not modified).
        ft_steps: S, the fine-tuned (stochastic, scored) last steps; 1 <= S <= K.
        num_inference_steps: K, DDIM steps of the whole chain; None: the base's.
        min_std: floor of each fine-tuned step's std (normalised action space).
        eta: DDIM stochasticity of the fine-tuned steps (1: DDPM-like std).
    """

    def __init__(
        self,
        base: DiffusionPolicy,
        ft_steps: int = 2,
        num_inference_steps: int | None = None,
        min_std: float = 0.1,
        eta: float = 1.0,
    ) -> None:
        super().__init__()
        if not isinstance(base, DiffusionPolicy):
            raise TypeError(f"DPPOChain needs a DiffusionPolicy, got {type(base).__name__}")
        k = int(num_inference_steps or base.num_inference_steps)
        self.timesteps = ddim_timesteps(base.num_train_steps, k)
        if not 1 <= ft_steps <= k:
            raise ValueError(f"ft_steps must be between 1 and the {k} DDIM steps, got {ft_steps}")
        if min_std <= 0:
            raise ValueError(f"min_std must be > 0 (the log-densities need a positive std), got {min_std}")
        self.frozen = copy.deepcopy(base).requires_grad_(False)
        self.policy = copy.deepcopy(base).requires_grad_(True)
        self.policy.num_inference_steps = k  # the saved policy denoises in as many steps as the chain
        self.frozen.reset()
        self.policy.reset()
        self.obs_dim, self.action_dim, self.horizon = base.obs_dim, base.action_dim, base.horizon
        self.execute = base.execute
        self.num_chain_steps, self.first_ft = int(ft_steps), k - int(ft_steps)
        self.min_std, self.eta = float(min_std), float(eta)
        # std of each fine-tuned step: depends on the schedule only, not on the inputs
        one = torch.zeros(1)
        self.step_stds = [
            max(float(self._ddim(one, one, i, self.eta).std), self.min_std) for i in range(self.first_ft, k)
        ]

    def _ddim(self, x: Tensor, eps: Tensor, i: int, eta: float) -> DDIMStep:
        """DDIM step i of the chain given the predicted noise; z = 0, so `.sample` is the mean."""
        ab, t = self.policy._alpha_bar64, self.timesteps[i]
        prev = ab[self.timesteps[i + 1]] if i + 1 < len(self.timesteps) else 1.0
        return ddim_step(x, eps, ab[t], prev, eta, torch.zeros_like(x), self.policy._clip)

    @torch.no_grad()
    def sample(self, state: Obs, deterministic: bool = False, noise: Tensor | None = None) -> ChainSample:
        """Run the chain for raw observations [B, O]; `noise` is x_T [B, H, A] (default: N(0, I), or 0 when
        deterministic). deterministic: eta = 0 everywhere, no injected noise; log_prob still scores it."""
        obs_n = self.policy.obs_norm(self.policy.state(state))
        x = initial_latent(self.policy, obs_n, deterministic, noise)
        for i in range(self.first_ft):
            x = self._ddim(x, self.frozen.eps(obs_n, x, self.timesteps[i]), i, 0.0).mean
        latents, log_probs = [x], []
        for j, std in enumerate(self.step_stds):
            i = self.first_ft + j
            eps = self.policy.eps(obs_n, x, self.timesteps[i])
            mean = self._ddim(x, eps, i, self.eta).mean
            x = self._ddim(x, eps, i, 0.0).mean if deterministic else mean + std * torch.randn_like(mean)
            latents.append(x)
            log_probs.append(gaussian_log_prob(x, mean, std))
        chunk = execute_chunk(self.policy, x, self.policy._clip)
        return ChainSample(chunk, torch.stack(latents, 1), torch.stack(log_probs, 1))

    def log_prob(self, state: Obs, chain: Tensor) -> Tensor:
        """Log-density [B, S] of each recorded fine-tuned step under the trainable network (differentiable)."""
        check_chain(chain, self.policy, self.num_chain_steps)
        obs_n = self.policy.obs_norm(self.policy.state(state))
        chain = chain.to(obs_n)
        out = []
        for j, std in enumerate(self.step_stds):
            i, x = self.first_ft + j, chain[:, j]
            mean = self._ddim(x, self.policy.eps(obs_n, x, self.timesteps[i]), i, self.eta).mean
            out.append(gaussian_log_prob(chain[:, j + 1], mean, std))
        return torch.stack(out, 1)

    def entropy(self, state: Obs, chain: Tensor) -> Tensor:
        """Entropy [B, S] of each fine-tuned step's Gaussian: a constant of the schedule (no gradient)."""
        check_chain(chain, self.policy, self.num_chain_steps)
        per_dim = torch.tensor(self.step_stds, device=chain.device).log() + 0.5 + LOG_SQRT_2PI
        return (per_dim * self.horizon * self.action_dim).expand(chain.shape[0], -1)

    def policy_parameters(self) -> list[nn.Parameter]:
        """The trainable copy's network: what PPO's actor optimiser trains (never the frozen copy)."""
        return list(self.policy.parameters())

    def base_policy(self) -> DiffusionPolicy:
        """The fine-tuned diffusion policy (shares parameters with this chain); see the module docstring for
        how it differs from the chain when ft_steps < K."""
        return self.policy
