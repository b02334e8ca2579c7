"""ReinFlow chain: exact per-step log-densities, the deterministic path equals the base flow, bounded noise."""

import copy

import pytest
import torch
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import load_policy, save_policy
from torch import nn
from torch.distributions import Normal

from robot_rl.finetune.reinflow import ReinFlowChain

OBS, A, H, K = 3, 2, 4, 3



@pytest.fixture(params=[False, True], ids=["flow", "shortcut"])
def base(request) -> FlowPolicy:
    torch.manual_seed(0)
    policy = FlowPolicy(OBS, A, horizon=H, execute=2, hidden=(32, 32), time_dim=8, shortcut=request.param)
    policy.fit_normalization(torch.randn(64, OBS) * 2 + 1, torch.rand(64, A) * 1.2 - 0.7)
    return policy


@pytest.fixture
def obs() -> torch.Tensor:
    return torch.randn(5, OBS) * 2 + 1


def varied_noise_net(chain: ReinFlowChain) -> ReinFlowChain:
    # The initial noise net is constant (zero last layer); random weights make its inputs matter.
    nn.init.normal_(chain.noise_net[-1].weight, std=0.5)
    return chain


def reference_log_prob(chain: ReinFlowChain, obs: torch.Tensor, latents: torch.Tensor) -> torch.Tensor:
    """x_{k+1} ~ N(x_k + v(obs, x_k, k/K; step 1/K) / K, sigma(obs, x_k, k/K)^2), written out by hand (a plain
    flow ignores the step size; a shortcut flow predicts the velocity of a step of 1/K)."""
    p, k_steps = chain.policy, latents.shape[1] - 1
    obs_n = (obs - p.obs_norm.shift) / p.obs_norm.scale
    out = []
    for k in range(k_steps):
        x, t = latents[:, k], k / k_steps
        v = p.velocity(obs_n, x, t, step=1 / k_steps)
        feats = torch.cat([obs_n, x.flatten(1), torch.full((x.shape[0], 1), t)], dim=-1)
        std = 0.08 + 0.16 * torch.sigmoid(chain.noise_net(feats)).view(x.shape)
        out.append(Normal(x + v / k_steps, std).log_prob(latents[:, k + 1]).sum((1, 2)))
    return torch.stack(out, 1)


def test_log_prob_equals_a_direct_computation(base, obs):
    chain = varied_noise_net(ReinFlowChain(base, num_steps=K))
    torch.manual_seed(1)
    s = chain.sample(obs)
    assert s.chunk.shape == (5, H, A) and s.chain.shape == (5, K + 1, H, A) and s.log_prob.shape == (5, K)
    assert (chain.num_chain_steps, chain.horizon, chain.execute) == (K, H, 2)
    with torch.no_grad():
        expected = reference_log_prob(chain, obs, s.chain)
    torch.testing.assert_close(s.log_prob, expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(chain.log_prob(obs, s.chain), expected, rtol=0, atol=1e-5)
    # the executed chunk is the clipped, unnormalised last latent
    last = s.chain[:, -1].clamp(-1, 1)
    torch.testing.assert_close(s.chunk, base.action_norm.unnormalize(last).clamp(-1, 1))


def test_sampling_is_reproducible_with_a_seed(base, obs):
    chain = ReinFlowChain(base, num_steps=K)
    torch.manual_seed(3)
    a = chain.sample(obs)
    torch.manual_seed(3)
    b = chain.sample(obs)
    for x, y in zip(a, b, strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=0)
    assert not torch.equal(chain.sample(obs).chain, a.chain)


def test_deterministic_chain_is_the_base_flow(base, obs, tmp_path):
    chain = varied_noise_net(ReinFlowChain(base, num_steps=K))
    s = chain.sample(obs, deterministic=True)
    assert torch.equal(s.chain[:, 0], torch.zeros(5, H, A))
    torch.testing.assert_close(
        s.chunk, base.predict_chunk(obs, deterministic=True, num_steps=K), rtol=0, atol=1e-6
    )
    torch.testing.assert_close(s.log_prob, chain.log_prob(obs, s.chain), rtol=0, atol=1e-5)
    noise = torch.randn(5, H, A)
    torch.testing.assert_close(
        chain.sample(obs, deterministic=True, noise=noise).chunk,
        base.predict_chunk(obs, noise=noise, deterministic=True, num_steps=K),
        rtol=0,
        atol=1e-6,
    )
    # the fine-tuned policy, saved and reloaded, acts as the chain's mean path
    loaded = load_policy(save_policy(chain.base_policy(), tmp_path / "policy"))
    assert isinstance(loaded, FlowPolicy) and loaded.num_inference_steps == K
    torch.testing.assert_close(loaded.predict_chunk(obs, deterministic=True), s.chunk, rtol=0, atol=1e-6)


def test_std_stays_within_bounds_and_starts_near_the_floor(base, obs):
    chain = ReinFlowChain(base, num_steps=K, min_std=0.05, max_std=0.3)
    x = torch.randn(5, H, A)
    obs_n = base.obs_norm(obs)
    std0 = chain.noise_std(obs_n, x, 0.0)
    assert bool((std0 >= 0.05).all()) and bool((std0 < 0.05 + 0.1 * 0.25).all())
    nn.init.normal_(chain.noise_net[-1].weight, std=50.0)  # saturates the squashing both ways
    std = torch.cat([chain.noise_std(obs_n, x * 10, t) for t in (0.0, 1 / 3, 2 / 3)])
    assert bool((std >= 0.05).all()) and bool((std <= 0.3).all())
    assert std.min() < 0.051 and std.max() > 0.299
    # entropy is that of the Gaussians with these stds
    s = chain.sample(obs)
    ent = chain.entropy(obs, s.chain)
    k_std = chain.noise_std(obs_n, s.chain[:, 1], 1 / 3)
    torch.testing.assert_close(ent[:, 1], Normal(torch.zeros_like(k_std), k_std).entropy().sum((1, 2)))


def test_gradients_reach_both_networks_and_not_the_base(base, obs):
    chain = ReinFlowChain(base, num_steps=K)
    before = copy.deepcopy(base.state_dict())
    s = chain.sample(obs)
    (chain.log_prob(obs, s.chain).sum() + chain.entropy(obs, s.chain).sum()).backward()
    params = chain.policy_parameters()
    assert {id(p) for p in params} == {id(p) for p in chain.parameters()}
    assert not {id(p) for p in params} & {id(p) for p in base.parameters()}
    assert all(p.grad is not None for p in params)
    assert any(p.grad.abs().sum() > 0 for p in chain.policy.net.parameters())
    assert chain.noise_net[-1].weight.grad.abs().sum() > 0
    torch.optim.SGD(params, lr=0.1).step()
    assert all(p.grad is None for p in base.parameters())
    assert all(torch.equal(before[k], v) for k, v in base.state_dict().items())
    assert chain.base_policy() is chain.policy and chain.base_policy() is not base


def test_perturbed_velocity_changes_the_log_prob(base, obs):
    chain = ReinFlowChain(base, num_steps=K)
    s = chain.sample(obs)
    other = copy.deepcopy(chain)
    with torch.no_grad():
        for p in other.policy.net.parameters():
            p.add_(0.05 * torch.randn_like(p))
        ratio = (other.log_prob(obs, s.chain) - s.log_prob).exp()
        same = (chain.log_prob(obs, s.chain) - s.log_prob).exp()
    assert (ratio - 1).abs().max() > 1e-2
    torch.testing.assert_close(same, torch.ones_like(same), rtol=0, atol=1e-4)


def test_rejects_bad_inputs(base, obs):
    with pytest.raises(ValueError, match="min_std"):
        ReinFlowChain(base, min_std=0.3, max_std=0.1)
    chain = ReinFlowChain(base, num_steps=K)
    with pytest.raises(ValueError, match="chain must be"):
        chain.log_prob(obs, torch.zeros(5, K, H, A))
    with pytest.raises(ValueError, match="noise must be"):
        chain.sample(obs, noise=torch.zeros(5, H + 1, A))
