"""Flow-matching policy: rectified flow from Gaussian noise to action chunks (Lipman et al. 2023; Liu et al. 2023).

Path and loss: with x_0 ~ N(0, I) (the `noise` input), x_1 the normalised action chunk and t ~ U[0, 1],
x_t = (1 - t) x_0 + t x_1, and the network v_theta(obs, x_t, t) regresses the path's velocity x_1 - x_0
(MSE). Sampling integrates dx/dt = v_theta from t = 0 to 1 with K Euler steps (`euler_step`, K = 1..10,
settable at inference); a straight path makes few steps accurate, which is why ReinFlow fine-tunes flows
with K = 1-4. ReinFlow turns each Euler step into a Gaussian transition by adding learned noise to it,
so `euler_step` is exposed on its own. The final sample is clipped to [-c, c] in the normalised space.

The network is `policies.denoiser.DenoiserMLP`, fed t * `TIME_SCALE` so its sinusoidal features see the
same range of times as a diffusion model's integer timesteps.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from policies.chunk_policy import ChunkPolicy
from policies.denoiser import DenoiserMLP

TIME_SCALE = 100.0


def euler_step(x: Tensor, velocity: Tensor, dt: float | Tensor) -> Tensor:
    """x_{t+dt} = x_t + dt * v(x_t, t)."""
    return x + dt * velocity


def flow_sample(velocity_fn: Callable[[Tensor, float], Tensor], x0: Tensor, num_steps: int) -> Tensor:
    """Integrate from t = 0 (x0) to t = 1 in `num_steps` Euler steps; `velocity_fn(x_t, t)` is the field."""
    if num_steps < 1:
        raise ValueError(f"num_steps must be >= 1, got {num_steps}")
    x, dt = x0, 1.0 / num_steps
    for k in range(num_steps):
        x = euler_step(x, velocity_fn(x, k * dt), dt)
    return x


class FlowPolicy(ChunkPolicy):
    """Chunked rectified-flow policy; see the module docstring and `ChunkPolicy` for the API.

    Args (beyond `ChunkPolicy`'s):
        hidden: hidden widths of the velocity MLP.
        time_dim: width of the time embedding.
        num_inference_steps: K, Euler steps of sampling (settable after training).
        clip_sample: clip the sample to [-c, c] in the normalised space; None: 1.0 when actions are min-max
            normalised, no clipping otherwise.
    """

    def __init__(
        self,
        obs_dim: int,
        action_dim: int,
        horizon: int = 8,
        execute: int | None = None,
        hidden: Sequence[int] = (256, 256, 256),
        time_dim: int = 32,
        num_inference_steps: int = 10,
        clip_sample: float | None = None,
        obs_norm: str = "mean_std",
        action_norm: str = "min_max",
    ) -> None:
        super().__init__(obs_dim, action_dim, horizon, execute, obs_norm, action_norm)
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be >= 1, got {num_inference_steps}")
        self.hidden, self.time_dim = [int(h) for h in hidden], int(time_dim)
        self.num_inference_steps, self.clip_sample = int(num_inference_steps), clip_sample
        self._clip = (
            (1.0 if action_norm != "mean_std" else None) if clip_sample is None else float(clip_sample)
        )
        self.net = DenoiserMLP(self.obs_dim, self.horizon, self.action_dim, self.hidden, self.time_dim)

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "hidden": self.hidden,
            "time_dim": self.time_dim,
            "num_inference_steps": self.num_inference_steps,
            "clip_sample": self.clip_sample,
        }

    def velocity(self, obs_n: Tensor, x_t: Tensor, t: float | Tensor) -> Tensor:
        """v_theta(obs, x_t, t) for t in [0, 1] (a float for the whole batch, or [B])."""
        t = torch.as_tensor(t, device=x_t.device, dtype=torch.float32).expand(x_t.shape[0])
        return self.net(obs_n, x_t, t * TIME_SCALE)

    def _sample(self, obs_n: Tensor, noise: Tensor, deterministic: bool, num_steps: int | None) -> Tensor:
        x = flow_sample(lambda x, t: self.velocity(obs_n, x, t), noise, num_steps or self.num_inference_steps)
        return x if self._clip is None else x.clamp(-self._clip, self._clip)

    def _loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        x0 = torch.randn_like(chunk_n)
        t = torch.rand(chunk_n.shape[0], device=chunk_n.device)
        tb = t.view(-1, 1, 1)
        x_t = (1 - tb) * x0 + tb * chunk_n
        return F.mse_loss(self.velocity(obs_n, x_t, t), chunk_n - x0)
