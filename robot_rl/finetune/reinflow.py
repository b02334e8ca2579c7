"""ReinFlow (Zhang et al. 2025): a flow policy turned into a Markov chain with exact likelihoods, for PPO.

The base `FlowPolicy` integrates dx/dt = v_theta(obs, x, t) from x_0 ~ N(0, I) to the normalised chunk in K
Euler steps. ReinFlow adds learned Gaussian noise to every step,

    x_{k+1} = x_k + v_theta(obs, x_k, t_k) / K + sigma_phi(obs, x_k, t_k) * eps_k,    t_k = k / K,

so each step is a diagonal Gaussian transition whose log-density is exact and differentiable in theta and
phi. The chain's likelihood is the product of the K transitions; x_0 does not depend on the policy, so it
cancels in a PPO ratio and is not scored. sigma_phi is a small MLP of (obs, x_k, t_k) squashed into
[min_std, max_std] per chunk element: the floor keeps every density finite and exploration alive, the
ceiling keeps the executed actions near the flow's. Its last layer starts at zero weights and a bias just
above min_std, so fine-tuning starts close to the pretrained flow.

`ReinFlowChain.sample` records x_0..x_K (normalised space) and the per-step log-densities. The executed chunk
is x_K clipped to the base's clip range, unnormalised and clamped to [-1, 1]; the clipping acts outside the
chain (the recorded x_K is unclipped), so the log-densities stay those of the Gaussians. PPO trains a copy of
the base's velocity network (the base stays untouched) and the noise network; `base_policy()` is the
fine-tuned `FlowPolicy`, which samples without injected noise (its deterministic chunk equals the chain's).

`ChainSample`, `gaussian_log_prob` and `gaussian_entropy` are shared with `robot_rl.finetune.dppo`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import Tensor, nn

from robot_rl.policies.chunk_policy import ChunkPolicy, Obs
from robot_rl.policies.flow import FlowPolicy, euler_step
from robot_rl.policies.mlp import mlp

LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)
INIT_STD_FRACTION = 0.05  # initial std = min_std + 5% of the [min_std, max_std] range


class ChainSample(NamedTuple):
    """One rollout of a chain policy for a batch of observations."""

    chunk: Tensor  # [B, H, A] executed action chunk, raw action space, in [-1, 1]
    chain: Tensor  # [B, S+1, H, A] the recorded latents of the stochastic part of the chain (normalised)
    log_prob: Tensor  # [B, S] log-density of each transition chain[:, k] -> chain[:, k+1]


def gaussian_log_prob(x: Tensor, mean: Tensor, std: float | Tensor) -> Tensor:
    """log N(x; mean, diag std^2) of chunks [B, H, A], summed over the chunk -> [B]."""
    std_t = torch.as_tensor(std, dtype=mean.dtype, device=mean.device)
    return (-0.5 * ((x - mean) / std_t) ** 2 - std_t.log() - LOG_SQRT_2PI).sum((-2, -1))


def gaussian_entropy(std: Tensor) -> Tensor:
    """Entropy of a diagonal Gaussian over chunks, from its std [B, H, A] -> [B]."""
    return (0.5 + LOG_SQRT_2PI + std.log()).sum((-2, -1))


def check_chain(chain: Tensor, policy: ChunkPolicy, num_chain_steps: int) -> None:
    expected = (num_chain_steps + 1, *policy.noise_shape)
    if chain.dim() != 4 or chain.shape[1:] != expected:
        raise ValueError(f"chain must be [B, {', '.join(map(str, expected))}], got {tuple(chain.shape)}")


def initial_latent(policy: ChunkPolicy, obs_n: Tensor, deterministic: bool, noise: Tensor | None) -> Tensor:
    """The chain's start: `noise` if given, else zeros (deterministic, as `predict_chunk`) or N(0, I)."""
    shape = (obs_n.shape[0], *policy.noise_shape)
    if noise is None:
        return obs_n.new_zeros(shape) if deterministic else torch.randn(shape, device=obs_n.device)
    if noise.shape != shape:
        raise ValueError(f"noise must be {list(shape)}, got {tuple(noise.shape)}")
    return noise.to(obs_n)


def execute_chunk(policy: ChunkPolicy, x: Tensor, clip: float | None) -> Tensor:
    """Normalised final latent -> the executed raw chunk, as the base policy would output it."""
    x = x if clip is None else x.clamp(-clip, clip)
    return policy.action_norm.unnormalize(x).clamp(-1.0, 1.0)


class ReinFlowChain(nn.Module):
    """A `FlowPolicy` with learned noise on each of its K Euler steps (module docstring).

    Args:
        base: the pretrained flow policy (copied; not modified).
        num_steps: K, the Euler steps of the chain (= S, the number of scored transitions).
        min_std, max_std: bounds of the injected noise's std, in the normalised action space.
        noise_hidden: hidden widths of the noise network.
    """

    def __init__(
        self,
        base: FlowPolicy,
        num_steps: int = 4,
        min_std: float = 0.08,
        max_std: float = 0.24,
        noise_hidden: Sequence[int] = (128, 128),
    ) -> None:
        super().__init__()
        if not isinstance(base, FlowPolicy):
            raise TypeError(f"ReinFlowChain needs a FlowPolicy, got {type(base).__name__}")
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps}")
        if not 0 < min_std <= max_std:
            raise ValueError(f"need 0 < min_std <= max_std, got {min_std}, {max_std}")
        self.policy = copy.deepcopy(base).requires_grad_(True)
        self.policy.num_inference_steps = int(num_steps)  # the saved policy integrates as the chain does
        self.policy.reset()
        self.obs_dim, self.action_dim, self.horizon = base.obs_dim, base.action_dim, base.horizon
        self.execute = base.execute
        self.num_chain_steps = int(num_steps)
        self.min_std, self.max_std = float(min_std), float(max_std)
        size = self.horizon * self.action_dim
        self.noise_net = mlp(self.obs_dim + size + 1, size, noise_hidden, activation=nn.SiLU)
        last = self.noise_net[-1]
        assert isinstance(last, nn.Linear)
        nn.init.zeros_(last.weight)
        nn.init.constant_(last.bias, math.log(INIT_STD_FRACTION / (1 - INIT_STD_FRACTION)))
        self.noise_net.to(base.obs_norm.shift.device)

    def noise_std(self, obs_n: Tensor, x: Tensor, t: float) -> Tensor:
        """sigma_phi(obs, x_t, t) [B, H, A], in [min_std, max_std]."""
        time = x.new_full((x.shape[0], 1), t)
        logits = self.noise_net(torch.cat([obs_n, x.flatten(1), time], dim=-1)).view(x.shape)
        return self.min_std + (self.max_std - self.min_std) * torch.sigmoid(logits)

    def transition(self, obs_n: Tensor, x: Tensor, k: int) -> tuple[Tensor, Tensor]:
        """Mean and std of x_{k+1} given x_k (normalised obs and latents)."""
        # k * dt, and euler_step, exactly as FlowPolicy samples: the deterministic chain reproduces its chunk
        dt = 1.0 / self.num_chain_steps
        mean = euler_step(x, self.policy.velocity(obs_n, x, k * dt, step=dt), dt)
        return mean, self.noise_std(obs_n, x, k * dt)

    @torch.no_grad()
    def sample(self, state: Obs, deterministic: bool = False, noise: Tensor | None = None) -> ChainSample:
        """Run the chain for raw observations [B, O]; `noise` is x_0 [B, H, A] (default: N(0, I), or 0 when
        deterministic). deterministic: no injected noise (the mean path); log_prob still scores it."""
        obs_n = self.policy.obs_norm(self.policy.state(state))
        x = initial_latent(self.policy, obs_n, deterministic, noise)
        latents, log_probs = [x], []
        for k in range(self.num_chain_steps):
            mean, std = self.transition(obs_n, x, k)
            x = mean if deterministic else mean + std * torch.randn_like(mean)
            latents.append(x)
            log_probs.append(gaussian_log_prob(x, mean, std))
        chunk = execute_chunk(self.policy, x, self.policy._clip)
        return ChainSample(chunk, torch.stack(latents, 1), torch.stack(log_probs, 1))

    def log_prob(self, state: Obs, chain: Tensor) -> Tensor:
        """Log-density [B, S] of each recorded transition under the current parameters (differentiable)."""
        check_chain(chain, self.policy, self.num_chain_steps)
        obs_n = self.policy.obs_norm(self.policy.state(state))
        chain = chain.to(obs_n)
        out = []
        for k in range(self.num_chain_steps):
            mean, std = self.transition(obs_n, chain[:, k], k)
            out.append(gaussian_log_prob(chain[:, k + 1], mean, std))
        return torch.stack(out, 1)

    def entropy(self, state: Obs, chain: Tensor) -> Tensor:
        """Entropy [B, S] of each transition's Gaussian at the recorded latents (differentiable in phi)."""
        check_chain(chain, self.policy, self.num_chain_steps)
        obs_n = self.policy.obs_norm(self.policy.state(state))
        chain = chain.to(obs_n)
        dt = 1.0 / self.num_chain_steps
        return torch.stack(
            [
                gaussian_entropy(self.noise_std(obs_n, chain[:, k], k * dt))
                for k in range(self.num_chain_steps)
            ],
            1,
        )

    def policy_parameters(self) -> list[nn.Parameter]:
        """The velocity network and the noise network: what PPO's actor optimiser trains."""
        return [*self.policy.parameters(), *self.noise_net.parameters()]

    def base_policy(self) -> FlowPolicy:
        """The fine-tuned flow policy (shares parameters with this chain; save it with `save_policy`)."""
        return self.policy
