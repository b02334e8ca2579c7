"""DPPO chain: exact log-densities of the fine-tuned DDIM steps, frozen prefix, noise floor, base equivalence."""

import copy
import math

import pytest
import torch
from robot_rl.policies.diffusion import DiffusionPolicy, ddim_timesteps
from torch import nn
from torch.distributions import Normal

from robot_rl.finetune.dppo import DPPOChain

OBS, A, H, T, K = 3, 2, 4, 20, 5



class PointEps(nn.Module):
    """The optimal noise predictor for data at the point mu, plus a random network of (obs, x, t).

    An untrained network alone predicts noise so far off that nearly every x0-estimate is clipped and the
    chunk is the clip box's corner; the analytic part keeps the chain inside the box, so the network's
    (obs-dependent) share is what the comparisons see.
    """

    def __init__(self, net: nn.Module, alpha_bar: torch.Tensor, mu: torch.Tensor) -> None:
        super().__init__()
        self.net, self.mu = net, mu
        self.register_buffer("ab", alpha_bar.float())

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.ab[t].view(-1, 1, 1)
        return (x - a.sqrt() * self.mu) / (1 - a).sqrt() + self.net(obs, x, t)


@pytest.fixture
def base() -> DiffusionPolicy:
    torch.manual_seed(0)
    policy = DiffusionPolicy(
        OBS, A, horizon=H, hidden=(32, 32), time_dim=8, num_train_steps=T, num_inference_steps=K
    )
    policy.fit_normalization(torch.randn(64, OBS) * 2 + 1, torch.rand(64, A) * 1.2 - 0.7)
    policy.net = PointEps(policy.net, policy.alpha_bar, torch.rand(H, A) - 0.5)
    return policy


@pytest.fixture
def obs() -> torch.Tensor:
    return torch.randn(6, OBS) * 2 + 1


def reference_log_prob(chain: DPPOChain, obs, latents, min_std: float) -> torch.Tensor:
    """DDPM-like DDIM (eta = 1) Gaussians of the last S steps, written out from Song et al. eq. 12."""
    p, s = chain.policy, latents.shape[1] - 1
    taus = ddim_timesteps(T, K)
    abar = p._alpha_bar64
    obs_n = (obs - p.obs_norm.shift) / p.obs_norm.scale
    out = []
    for j in range(s):
        i = K - s + j
        a, a_prev = abar[taus[i]], (abar[taus[i + 1]] if i + 1 < K else 1.0)
        x = latents[:, j]
        eps = p.net(obs_n, x, torch.full((x.shape[0],), taus[i]))
        x0 = ((x - math.sqrt(1 - a) * eps) / math.sqrt(a)).clamp(-1, 1)
        eps = (x - math.sqrt(a) * x0) / math.sqrt(1 - a)
        sigma = math.sqrt((1 - a_prev) / (1 - a)) * math.sqrt(1 - a / a_prev)
        mean = math.sqrt(a_prev) * x0 + math.sqrt(1 - a_prev - sigma**2) * eps
        std = torch.full_like(mean, max(sigma, min_std))
        out.append(Normal(mean, std).log_prob(latents[:, j + 1]).sum((1, 2)))
    return torch.stack(out, 1)


@pytest.mark.parametrize("ft_steps", [1, 2, K])
def test_log_prob_equals_a_direct_computation(base, obs, ft_steps):
    chain = DPPOChain(base, ft_steps=ft_steps, min_std=0.1)
    torch.manual_seed(1)
    s = chain.sample(obs)
    assert s.chain.shape == (6, ft_steps + 1, H, A) and s.log_prob.shape == (6, ft_steps)
    assert (chain.num_chain_steps, chain.horizon, chain.execute) == (ft_steps, H, base.execute)
    with torch.no_grad():
        expected = reference_log_prob(chain, obs, s.chain, 0.1)
    torch.testing.assert_close(s.log_prob, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(chain.log_prob(obs, s.chain), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(
        s.chunk, base.action_norm.unnormalize(s.chain[:, -1].clamp(-1, 1)).clamp(-1, 1)
    )


def test_deterministic_chain_is_the_base_ddim(base, obs):
    for ft_steps, k in ((2, None), (3, 3)):
        chain = DPPOChain(base, ft_steps=ft_steps, num_inference_steps=k, min_std=1e-6)
        s = chain.sample(obs, deterministic=True)
        expected = base.predict_chunk(obs, deterministic=True, num_steps=k)
        torch.testing.assert_close(s.chunk, expected, rtol=0, atol=1e-6)
        torch.testing.assert_close(s.log_prob, chain.log_prob(obs, s.chain), rtol=0, atol=1e-4)
        noise = torch.randn(6, H, A)
        torch.testing.assert_close(
            chain.sample(obs, deterministic=True, noise=noise).chunk,
            base.predict_chunk(obs, noise=noise, deterministic=True, num_steps=k),
            rtol=0,
            atol=1e-6,
        )
        assert chain.base_policy().num_inference_steps == (k or K)


def test_sampling_is_reproducible_with_a_seed(base, obs):
    chain = DPPOChain(base)
    torch.manual_seed(3)
    a = chain.sample(obs)
    torch.manual_seed(3)
    b = chain.sample(obs)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert not torch.equal(chain.sample(obs).chain, a.chain)


def test_frozen_steps_get_no_gradient_and_ignore_the_trained_copy(base, obs):
    chain = DPPOChain(base, ft_steps=2)
    before = copy.deepcopy(base.state_dict())
    torch.manual_seed(4)
    s = chain.sample(obs)
    chain.log_prob(obs, s.chain).sum().backward()
    assert all(p.grad is None and not p.requires_grad for p in chain.frozen.parameters())
    params = chain.policy_parameters()
    assert {id(p) for p in params} == {id(p) for p in chain.policy.parameters()}
    assert all(p.grad is not None for p in params) and any(p.grad.abs().sum() > 0 for p in params)
    torch.optim.SGD(params, lr=0.5).step()
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    # the latent entering the fine-tuned steps comes from the frozen copy alone; the rest moved
    torch.manual_seed(4)
    moved = chain.sample(obs)
    torch.testing.assert_close(moved.chain[:, 0], s.chain[:, 0], rtol=0, atol=0)
    ratio = (chain.log_prob(obs, s.chain).detach() - s.log_prob).exp()
    assert (ratio - 1).abs().max() > 1e-2
    assert chain.base_policy() is chain.policy and chain.base_policy() is not base


def test_std_has_a_floor(base, obs):
    chain = DPPOChain(base, ft_steps=K, min_std=0.1)
    assert len(chain.step_stds) == K and min(chain.step_stds) >= 0.1
    assert chain.step_stds[-1] == 0.1  # DDIM's last step is noiseless: only the floor remains
    assert max(chain.step_stds) > 0.1  # early steps keep their larger DDPM-like std
    s = chain.sample(obs)
    expected = torch.stack([Normal(0.0, torch.full((H, A), sd)).entropy().sum() for sd in chain.step_stds])
    torch.testing.assert_close(chain.entropy(obs, s.chain), expected.expand(6, -1))
    # from the same x_T, the last step lands on x0_hat (for any eta) plus noise of exactly the floor's size
    last = DPPOChain(base, ft_steps=1, min_std=0.1)
    x_T = torch.randn(6, H, A).repeat(400, 1, 1)
    noisy = last.sample(obs.repeat(400, 1), noise=x_T).chain
    mean = last.sample(obs.repeat(400, 1), deterministic=True, noise=x_T).chain
    torch.testing.assert_close(noisy[:, 0], mean[:, 0], rtol=0, atol=0)
    assert abs((noisy[:, 1] - mean[:, 1]).std().item() - 0.1) < 0.005


def test_rejects_bad_arguments(base, obs):
    with pytest.raises(ValueError, match="ft_steps"):
        DPPOChain(base, ft_steps=K + 1)
    with pytest.raises(ValueError, match="min_std"):
        DPPOChain(base, min_std=0.0)
    with pytest.raises(ValueError, match="chain must be"):
        DPPOChain(base, ft_steps=2).log_prob(obs, torch.zeros(6, 2, H, A))
