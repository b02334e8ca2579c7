"""Flow-matching policy: rectified flow from Gaussian noise to action chunks (Lipman et al. 2023; Liu et al. 2023).

Path and loss: with x_0 ~ N(0, I) (the `noise` input), x_1 the normalised action chunk and t ~ U[0, 1],
x_t = (1 - t) x_0 + t x_1, and the network v_theta(obs, x_t, t) regresses the path's velocity x_1 - x_0
(MSE). Sampling integrates dx/dt = v_theta from t = 0 to 1 with K Euler steps (`euler_step`, K = 1..10,
settable at inference); a straight path makes few steps accurate, which is why ReinFlow fine-tunes flows
with K = 1-4. ReinFlow turns each Euler step into a Gaussian transition by adding learned noise to it,
so `euler_step` is exposed on its own. The final sample is clipped to [-c, c] in the normalised space.

The network is `robot_rl.policies.denoiser.DenoiserMLP`, fed t * `TIME_SCALE` so its sinusoidal features see the
same range of times as a diffusion model's integer timesteps.

Shortcut model (`shortcut=True`, Frans et al. 2024): the network also sees the step size d and predicts the
average velocity over a step of size d, so one or two large Euler steps land where many small ones would.
Training mixes two targets over each batch: flow matching at d = 0 (the instantaneous velocity), and, for a
`shortcut_fraction` of the batch, self-consistency: the prediction for a step of 2d regresses the mean of two
consecutive steps of d (d = 1/2^L .. 1/2, L = `shortcut_levels`; the two half steps of the smallest d query
d = 0), computed without gradient. Sampling with K steps conditions on d = 1/K; powers of two up to
2^(L-1) are the trained sizes. A plain flow's single Euler step from x_0 lands on the conditional mean of the
data (a multi-modal chunk collapses to its average); a shortcut model's does not.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.denoiser import DenoiserMLP
from torch import Tensor

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
        shortcut: train and sample as a shortcut model (module docstring).
        shortcut_fraction: share of each batch trained on the self-consistency target.
        shortcut_levels: L; the smallest trained step is 1/2^L.
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
        shortcut: bool = False,
        shortcut_fraction: float = 0.25,
        shortcut_levels: int = 7,
        cameras: Mapping[str, Sequence[int]] | None = None,
        encoder: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(obs_dim, action_dim, horizon, execute, obs_norm, action_norm, cameras, encoder)
        if num_inference_steps < 1:
            raise ValueError(f"num_inference_steps must be >= 1, got {num_inference_steps}")
        if not 0.0 < shortcut_fraction < 1.0:
            raise ValueError(f"shortcut_fraction must be in (0, 1), got {shortcut_fraction}")
        if shortcut_levels < 1:
            raise ValueError(f"shortcut_levels must be >= 1, got {shortcut_levels}")
        self.shortcut = bool(shortcut)
        self.shortcut_fraction, self.shortcut_levels = float(shortcut_fraction), int(shortcut_levels)
        self.hidden, self.time_dim = [int(h) for h in hidden], int(time_dim)
        self.num_inference_steps, self.clip_sample = int(num_inference_steps), clip_sample
        self._clip = (
            (1.0 if action_norm != "mean_std" else None) if clip_sample is None else float(clip_sample)
        )
        self.net = DenoiserMLP(
            self.cond_dim, self.horizon, self.action_dim, self.hidden, self.time_dim, step_input=self.shortcut
        )

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "hidden": self.hidden,
            "time_dim": self.time_dim,
            "num_inference_steps": self.num_inference_steps,
            "clip_sample": self.clip_sample,
            "shortcut": self.shortcut,
            "shortcut_fraction": self.shortcut_fraction,
            "shortcut_levels": self.shortcut_levels,
        }

    def velocity(
        self, obs_n: Tensor, x_t: Tensor, t: float | Tensor, step: float | Tensor | None = None
    ) -> Tensor:
        """v_theta(obs, x_t, t) for t in [0, 1] (a float for the whole batch, or [B]). `step` is the Euler
        step size the velocity is for: a shortcut model is conditioned on it (None: 0, the instantaneous
        velocity); a plain flow ignores it."""
        batch = (x_t.shape[0],)
        t = torch.as_tensor(t, device=x_t.device, dtype=torch.float32).expand(batch)
        if not self.shortcut:
            return self.net(obs_n, x_t, t * TIME_SCALE)
        d = torch.as_tensor(0.0 if step is None else step, device=x_t.device, dtype=torch.float32).expand(batch)
        return self.net(obs_n, x_t, t * TIME_SCALE, d * TIME_SCALE)

    def _sample(self, obs_n: Tensor, noise: Tensor, deterministic: bool, num_steps: int | None) -> Tensor:
        k = num_steps or self.num_inference_steps
        x = flow_sample(lambda x, t: self.velocity(obs_n, x, t, step=1.0 / k), noise, k)
        return x if self._clip is None else x.clamp(-self._clip, self._clip)

    def _loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        x0 = torch.randn_like(chunk_n)
        t = torch.rand(chunk_n.shape[0], device=chunk_n.device)
        tb = t.view(-1, 1, 1)
        x_t = (1 - tb) * x0 + tb * chunk_n
        flow_loss = F.mse_loss(self.velocity(obs_n, x_t, t), chunk_n - x0)
        if not self.shortcut:
            return flow_loss
        return flow_loss + self._self_consistency_loss(obs_n, chunk_n)

    def _self_consistency_loss(self, obs_n: Tensor, chunk_n: Tensor) -> Tensor:
        """A step of 2d regresses the mean of two steps of d (the smallest d queries d = 0), on a random share
        of the batch."""
        n = max(1, round(chunk_n.shape[0] * self.shortcut_fraction))
        obs_n, x1 = obs_n[:n], chunk_n[:n]
        levels = torch.randint(1, self.shortcut_levels + 1, (n,), device=x1.device)
        d = 0.5 ** levels.float()  # the half step, 1/2^L .. 1/2
        query = torch.where(levels == self.shortcut_levels, torch.zeros_like(d), d)
        t = torch.rand(n, device=x1.device) * (1 - 2 * d)  # so that t + 2d <= 1
        tb, db = t.view(-1, 1, 1), d.view(-1, 1, 1)
        x0 = torch.randn_like(x1)
        x_t = (1 - tb) * x0 + tb * x1
        with torch.no_grad():
            v1 = self.velocity(obs_n, x_t, t, query)
            v2 = self.velocity(obs_n, x_t + db * v1, t + d, query)
        return F.mse_loss(self.velocity(obs_n, x_t, t, 2 * d), (v1 + v2) / 2)
