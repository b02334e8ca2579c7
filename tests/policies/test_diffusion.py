"""DDIM sampling against an independent float64 reference, with analytic noise predictors.

For data x_0 ~ N(mu, s^2) (s = 0: a single point), x_t = sqrt(a) x_0 + sqrt(1 - a) eps is Gaussian, and the
optimal noise predictor is E[eps | x_t] = sqrt(1 - a) (x_t - sqrt(a) mu) / (a s^2 + 1 - a). With it, every
x0-estimate of a single-point distribution is exactly mu, so DDIM must land on mu.
"""

import numpy as np
import pytest
import torch
from robot_rl.policies.diffusion import DiffusionPolicy, alpha_bars, ddim_sample, ddim_step, ddim_timesteps
from torch import nn

T = 100


def analytic_eps(mu: np.ndarray, s: float, abar: np.ndarray):
    def eps(x, t):
        a = abar[t]
        return np.sqrt(1 - a) * (x - np.sqrt(a) * mu) / (a * s**2 + 1 - a)

    return eps


def reference_ddim(x_T, eps_fn, abar, taus, eta, zs):
    """DDIM (Song et al. 2021, eq. 12), written out in numpy."""
    x = x_T.copy()
    for i, t in enumerate(taus):
        a_t = abar[t]
        a_prev = abar[taus[i + 1]] if i + 1 < len(taus) else 1.0
        e = eps_fn(x, t)
        x0_hat = (x - np.sqrt(1 - a_t) * e) / np.sqrt(a_t)
        sigma = eta * np.sqrt((1 - a_prev) / (1 - a_t)) * np.sqrt(1 - a_t / a_prev)
        x = np.sqrt(a_prev) * x0_hat + np.sqrt(1 - a_prev - sigma**2) * e + sigma * zs[i]
    return x


def torch_eps(eps_np):
    return lambda x, t: torch.from_numpy(eps_np(x.numpy(), t))


@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_schedules_decrease_from_one_to_near_zero(schedule):
    abar = alpha_bars(schedule, T)
    assert abar.dtype == torch.float64 and abar.shape == (T,)
    assert bool((abar[1:] < abar[:-1]).all()) and 0.98 < abar[0] < 1 and abar[-1] < 0.01


def test_ddim_timesteps_span_the_chain():
    assert ddim_timesteps(100, 10) == [99, 88, 77, 66, 55, 44, 33, 22, 11, 0]
    assert ddim_timesteps(100, 1) == [99]
    with pytest.raises(ValueError):
        ddim_timesteps(10, 11)


@pytest.mark.parametrize("eta", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("schedule", ["cosine", "linear"])
def test_sampler_matches_reference(schedule, eta):
    rng = np.random.default_rng(0)
    abar = alpha_bars(schedule, T).numpy()
    mu, s = np.array([0.3, -0.6, 0.1]), 0.2
    taus = ddim_timesteps(T, 10)
    x_T = rng.normal(size=(64, 3))
    zs = rng.normal(size=(len(taus), 64, 3))
    eps = analytic_eps(mu, s, abar)
    expected = reference_ddim(x_T, eps, abar, taus, eta, zs)
    got = ddim_sample(torch_eps(eps), torch.from_numpy(x_T), abar, taus, eta, step_noise=torch.from_numpy(zs))
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("eta", [0.0, 1.0])
@pytest.mark.parametrize("steps", [1, 3, 10])
def test_single_point_data_lands_on_the_point(steps, eta):
    abar = alpha_bars("cosine", T).numpy()
    mu = np.array([0.25, -0.75])
    x_T = np.random.default_rng(1).normal(size=(16, 2)) * 3
    x0 = ddim_sample(
        torch_eps(analytic_eps(mu, 0.0, abar)), torch.from_numpy(x_T), abar, ddim_timesteps(T, steps), eta
    )
    np.testing.assert_allclose(x0.numpy(), np.broadcast_to(mu, x0.shape), atol=1e-9)


def test_deterministic_ddim_transports_noise_to_the_data_distribution():
    # DDIM is Euler on the probability-flow ODE in sigma = sqrt((1 - abar) / abar): its big last steps shrink
    # the spread (it tends to s from below as K grows), while the mean is right at any K.
    abar = alpha_bars("cosine", T).numpy()
    mu, s = 0.4, 0.3
    x_T = torch.from_numpy(np.random.default_rng(2).normal(size=(20000, 1)))
    eps = torch_eps(analytic_eps(np.array([mu]), s, abar))
    stds = []
    for k in (10, 50, 100):
        x0 = ddim_sample(eps, x_T, abar, ddim_timesteps(T, k), 0.0).numpy()
        assert abs(x0.mean() - mu) < 0.01
        stds.append(x0.std())
    assert stds[0] < stds[1] < stds[2] < s and s - stds[2] < 0.01


def test_clipped_x0_estimate_recomputes_eps():
    x_t, eps = torch.tensor([[3.0, 0.2]]), torch.tensor([[0.0, 0.1]])
    step = ddim_step(x_t, eps, 0.5, 1.0, clip_x0=1.0)  # last step: the sample is the x0-estimate
    torch.testing.assert_close(step.sample, step.x0)
    assert step.x0[0, 0] == 1.0 and step.std == 0.0
    mid = ddim_step(x_t, eps, 0.5, 0.8, eta=1.0, noise=torch.zeros_like(x_t), clip_x0=1.0)
    torch.testing.assert_close(mid.sample, mid.mean)
    assert mid.std > 0


class AnalyticSinglePoint(nn.Module):
    """Stands in for the policy's network: the optimal eps for data at `point` (normalised space)."""

    def __init__(self, point: torch.Tensor, abar: torch.Tensor) -> None:
        super().__init__()
        self.point, self.abar = point, abar

    def forward(self, obs, x, t):
        a = self.abar[t].view(-1, 1, 1)
        return ((x - a.sqrt() * self.point) / (1 - a).sqrt()).to(x.dtype)


@pytest.mark.parametrize("deterministic", [True, False])
def test_policy_sampling_goes_through_ddim_to_the_point(deterministic):
    policy = DiffusionPolicy(
        2, 2, horizon=3, hidden=(8,), eta=1.0, obs_norm="identity", action_norm="identity"
    )
    point = torch.tensor([[0.5, -0.2], [0.1, 0.0], [-0.9, 0.3]])
    policy.net = AnalyticSinglePoint(point, alpha_bars("cosine", T))
    noise = torch.randn(5, 3, 2)
    chunk = policy.predict_chunk(torch.zeros(5, 2), noise=noise, deterministic=deterministic)
    torch.testing.assert_close(chunk, point.expand(5, 3, 2), atol=1e-5, rtol=0)


def test_same_noise_same_chunk_and_training_loss_is_finite():
    torch.manual_seed(0)
    policy = DiffusionPolicy(4, 2, horizon=3, hidden=(32, 32))
    obs, noise = torch.randn(6, 4), torch.randn(6, 3, 2)
    first = policy.predict_chunk(obs, noise=noise)
    torch.testing.assert_close(policy.predict_chunk(obs, noise=noise), first, rtol=0, atol=0)
    assert first.abs().max() <= 1.0
    assert policy.predict_chunk(obs, noise=noise, num_steps=2).shape == (6, 3, 2)
    assert torch.isfinite(policy.loss(obs, torch.rand(6, 3, 2) * 2 - 1))
