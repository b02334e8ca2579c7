"""Diffusion policy: DDPM training of a noise predictor, DDIM sampling in a few steps (Chi et al. 2023).

Training (Ho et al. 2020): for a normalised action chunk x_0, a timestep t ~ U{0..T-1} and eps ~ N(0, I),
x_t = sqrt(abar_t) x_0 + sqrt(1 - abar_t) eps, and the network eps_theta(obs, x_t, t) regresses eps (MSE).
abar_t = prod_{s<=t} (1 - beta_s) with a cosine (Nichol & Dhariwal 2021) or linear beta schedule.

Sampling (DDIM, Song et al. 2021, eq. 12) on K of the T timesteps, tau_1 > ... > tau_K = 0, from x_T = the
`noise` input: for each step t -> t' (t' = the next timestep, or "before 0" with abar = 1),

    x0_hat = (x_t - sqrt(1 - abar_t) eps) / sqrt(abar_t)                     (clipped to [-c, c] if asked)
    sigma  = eta * sqrt((1 - abar_t') / (1 - abar_t)) * sqrt(1 - abar_t / abar_t')
    x_t'   = sqrt(abar_t') x0_hat + sqrt(1 - abar_t' - sigma^2) eps + sigma z,    z ~ N(0, I)

eta = 0 is deterministic given x_T (the map DSRL steers through); eta = 1 is DDPM-like. When x0_hat is
clipped, eps is recomputed from the clipped x0_hat so the step stays consistent (as DPPO does). `ddim_step`
is that one update, returning the Gaussian's mean and std too: DPPO's log-probabilities of the denoising
chain are built from them.

The network is `robot_rl.policies.denoiser.DenoiserMLP` (an MLP over [obs, flattened noisy chunk, time embedding]).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.denoiser import DenoiserMLP
from torch import Tensor

SCHEDULES = ("cosine", "linear")


def alpha_bars(schedule: str, num_steps: int) -> Tensor:
    """abar_t for t = 0..T-1 (float64 [T]).

    cosine: abar(t) = f(t) / f(0), f(t) = cos^2(((t / T) + s) / (1 + s) * pi / 2), s = 0.008, betas clipped to
    0.999. linear: DDPM's betas 1e-4..0.02 for T = 1000, scaled by 1000 / T so that a short chain still ends
    near pure noise (as in Improved DDPM).
    """
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    if schedule == "cosine":
        s = 0.008
        t = torch.arange(num_steps + 1, dtype=torch.float64) / num_steps
        f = torch.cos((t + s) / (1 + s) * math.pi / 2) ** 2
        betas = (1 - f[1:] / f[:-1]).clamp(max=0.999)
    elif schedule == "linear":
        scale = 1000 / num_steps
        betas = torch.linspace(scale * 1e-4, scale * 0.02, num_steps, dtype=torch.float64).clamp(max=0.999)
    else:
        raise ValueError(f"unknown beta schedule {schedule!r}; choose one of {', '.join(SCHEDULES)}")
    return torch.cumprod(1 - betas, dim=0)


def ddim_timesteps(num_train_steps: int, num_steps: int) -> list[int]:
    """K timesteps from T-1 down to 0, evenly spaced (both ends included)."""
    if not 1 <= num_steps <= num_train_steps:
        raise ValueError(f"DDIM steps must be between 1 and {num_train_steps}, got {num_steps}")
    if num_steps == 1:
        return [num_train_steps - 1]
    return [round(x) for x in torch.linspace(num_train_steps - 1, 0, num_steps, dtype=torch.float64).tolist()]


class DDIMStep(NamedTuple):
    """One DDIM update: `sample` = `mean` + `std` * z, and the clean-chunk estimate `x0`."""

    sample: Tensor
    mean: Tensor
    std: float | Tensor
    x0: Tensor


def ddim_step(
    x_t: Tensor,
    eps: Tensor,
    alpha_bar_t: float | Tensor,
    alpha_bar_prev: float | Tensor,
    eta: float = 0.0,
    noise: Tensor | None = None,
    clip_x0: float | None = None,
) -> DDIMStep:
    """x_t -> x_t' (module docstring); `noise` is z (drawn when eta > 0 and it is None)."""
    x0 = (x_t - (1 - alpha_bar_t) ** 0.5 * eps) / alpha_bar_t**0.5
    if clip_x0 is not None:
        x0 = x0.clamp(-clip_x0, clip_x0)
        eps = (x_t - alpha_bar_t**0.5 * x0) / (1 - alpha_bar_t) ** 0.5
    std = eta * ((1 - alpha_bar_prev) / (1 - alpha_bar_t)) ** 0.5 * (1 - alpha_bar_t / alpha_bar_prev) ** 0.5
    direction = (1 - alpha_bar_prev - std**2) ** 0.5
    mean = alpha_bar_prev**0.5 * x0 + direction * eps
    if eta == 0:
        return DDIMStep(mean, mean, std, x0)
    z = torch.randn_like(x_t) if noise is None else noise
    return DDIMStep(mean + std * z, mean, std, x0)


def ddim_sample(
    eps_fn: Callable[[Tensor, int], Tensor],
    x_T: Tensor,
    alpha_bar: Tensor | Sequence[float],
    timesteps: Sequence[int],
    eta: float = 0.0,
    clip_x0: float | None = None,
    step_noise: Sequence[Tensor] | None = None,
) -> Tensor:
    """Run the DDIM chain from x_T over `timesteps` (descending); `eps_fn(x_t, t)` predicts the noise.

    `step_noise[k]` is the z of step k (eta > 0); None draws it. Returns x_0.
    """
    ab = [float(a) for a in alpha_bar]
    x = x_T
    for k, t in enumerate(timesteps):
        prev = timesteps[k + 1] if k + 1 < len(timesteps) else -1
        z = step_noise[k] if step_noise is not None else None
        x = ddim_step(x, eps_fn(x, t), ab[t], ab[prev] if prev >= 0 else 1.0, eta, z, clip_x0).sample
    return x


class DiffusionPolicy(ChunkPolicy):
    """Chunked diffusion policy; see the module docstring and `ChunkPolicy` for the API.

    Args (beyond `ChunkPolicy`'s):
        hidden: hidden widths of the noise-prediction MLP.
        time_dim: width of the timestep embedding.
        num_train_steps: T, diffusion timesteps of training.
        num_inference_steps: K, DDIM steps of sampling (settable after training).
        beta_schedule: "cosine" or "linear".
        eta: DDIM stochasticity for non-deterministic sampling (0: deterministic given x_T).
        clip_sample: clip x0_hat to [-c, c] in the normalised space; None: 1.0 when actions are min-max
            normalised (the data lies in [-1, 1] there), no clipping otherwise.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 8,
        execute: int | None = None,
        hidden: Sequence[int] = (256, 256, 256),
        time_dim: int = 32,
        num_train_steps: int = 100,
        num_inference_steps: int = 10,
        beta_schedule: str = "cosine",
        eta: float = 0.0,
        clip_sample: float | None = None,
        obs_norm: str = "mean_std",
        action_norm: str = "min_max",
        cameras: Mapping[str, Sequence[int]] | None = None,
        encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(obs_dim, action_dim, horizon, execute, obs_norm, action_norm, cameras, encoder)
        self.hidden, self.time_dim = [int(h) for h in hidden], int(time_dim)
        self.num_train_steps, self.beta_schedule, self.eta = int(num_train_steps), beta_schedule, float(eta)
        if not 0.0 <= self.eta <= 1.0:
            raise ValueError(f"eta must be in [0, 1], got {eta}")
        self.num_inference_steps = int(num_inference_steps)
        ddim_timesteps(self.num_train_steps, self.num_inference_steps)  # validates K <= T
        self.clip_sample = clip_sample
        self._clip = (
            (1.0 if action_norm != "mean_std" else None) if clip_sample is None else float(clip_sample)
        )
        self.register_buffer(
            "alpha_bar", alpha_bars(beta_schedule, self.num_train_steps).float(), persistent=False
        )
        self._alpha_bar64 = alpha_bars(beta_schedule, self.num_train_steps).tolist()
        self.net = DenoiserMLP(self.cond_dim, self.horizon, self.action_dim, self.hidden, self.time_dim)

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "hidden": self.hidden,
            "time_dim": self.time_dim,
            "num_train_steps": self.num_train_steps,
            "num_inference_steps": self.num_inference_steps,
            "beta_schedule": self.beta_schedule,
            "eta": self.eta,
            "clip_sample": self.clip_sample,
        }

    def eps(self, obs_n: Tensor, x_t: Tensor, t: int | Tensor) -> Tensor:
        """Predicted noise at timestep t (an int for the whole batch, or [B])."""
        t = torch.as_tensor(t, device=x_t.device).expand(x_t.shape[0])
        return self.net(obs_n, x_t, t)

    def _sample(self, obs_n: Tensor, noise: Tensor, deterministic: bool, num_steps: int | None) -> Tensor:
        timesteps = ddim_timesteps(self.num_train_steps, num_steps or self.num_inference_steps)
        eta = 0.0 if deterministic else self.eta
        return ddim_sample(
            lambda x, t: self.eps(obs_n, x, t), noise, self._alpha_bar64, timesteps, eta, self._clip
        )

    def _loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        b = chunk_n.shape[0]
        t = torch.randint(0, self.num_train_steps, (b,), device=chunk_n.device)
        eps = torch.randn_like(chunk_n)
        ab = self.alpha_bar[t].view(b, 1, 1)
        x_t = ab.sqrt() * chunk_n + (1 - ab).sqrt() * eps
        return F.mse_loss(self.net(obs_n, x_t, t), eps)
