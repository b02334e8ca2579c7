"""Normaliser: the modes, exact inverses, constant dimensions, statistics saved as buffers."""

import pytest
import torch
from robot_rl.policies.normalize import Normalizer


def test_min_max_maps_the_data_range_onto_the_unit_box_and_back():
    x = torch.tensor([[0.0, 10.0, 3.0], [2.0, 20.0, 3.0], [1.0, 12.0, 3.0]])
    norm = Normalizer(3, "min_max").fit(x)
    y = norm(x)
    assert y[:, :2].amin(0).tolist() == [-1.0, -1.0] and y[:, :2].amax(0).tolist() == [1.0, 1.0]
    assert y[:, 2].tolist() == [0.0, 0.0, 0.0]  # a constant dimension is centred, never divided by ~0
    torch.testing.assert_close(norm.unnormalize(y), x)


def test_mean_std_and_identity():
    x = torch.randn(1000, 2, dtype=torch.float64) * torch.tensor([3.0, 0.5]) + torch.tensor([1.0, -2.0])
    y = Normalizer(2, "mean_std").fit(x.float())(x.float())
    torch.testing.assert_close(y.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(2), atol=1e-5, rtol=0)
    ident = Normalizer(2, "identity").fit(x.float())
    assert torch.equal(ident(x.float()), x.float())


def test_statistics_are_buffers_in_the_state_dict():
    norm = Normalizer(2, "mean_std").fit(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    fresh = Normalizer(2, "mean_std")
    fresh.load_state_dict(norm.state_dict())
    assert torch.equal(fresh.shift, torch.tensor([2.0, 4.0])) and torch.equal(
        fresh.scale, torch.tensor([1.0, 2.0])
    )


def test_unknown_mode_and_empty_data():
    with pytest.raises(ValueError, match="choose one of"):
        Normalizer(2, "zscore")
    with pytest.raises(ValueError, match="zero samples"):
        Normalizer(2).fit(torch.zeros(0, 2))


def test_running_norm_matches_the_statistics_of_everything_seen():
    from robot_rl.policies.normalize import RunningNorm

    torch.manual_seed(0)
    norm = RunningNorm(3)
    x = torch.cat([torch.randn(7, 3) * 4 + 2, torch.randn(100, 3) * 0.5 - 1, torch.randn(1, 3)])
    for chunk in (x[:7], x[7:50], x[50:107], x[107:]):  # uneven batches merge exactly
        norm.update(chunk)
    torch.testing.assert_close(norm.mean, x.mean(0), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(norm.var, x.var(0, unbiased=False), atol=1e-5, rtol=1e-5)
    assert norm.count.item() == 108
    y = norm(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(3), atol=1e-4, rtol=0)


def test_running_norm_is_the_identity_before_any_data_and_clips_outliers():
    from robot_rl.policies.normalize import RunningNorm

    norm = RunningNorm(2, clip=5.0)
    x = torch.tensor([[0.3, -2.0]])
    torch.testing.assert_close(norm(x), x)
    norm.update(torch.randn(500, 2))
    assert norm(torch.tensor([[1e6, -1e6]])).abs().max().item() == 5.0


def test_running_norm_statistics_travel_in_the_state_dict():
    from robot_rl.policies.normalize import RunningNorm

    a, b = RunningNorm(4), RunningNorm(4)
    a.update(torch.randn(64, 4) * 3 + 1)
    b.load_state_dict(a.state_dict())
    x = torch.randn(5, 4)
    torch.testing.assert_close(a(x), b(x))
    assert set(a.state_dict()) == {"mean", "var", "count"}


def test_update_preserving_keeps_every_layer_output_while_the_statistics_move():
    from robot_rl.policies.ensemble import EnsembleLinear
    from robot_rl.policies.normalize import RunningNorm

    torch.manual_seed(0)
    norm = RunningNorm(3, clip=50.0)
    norm.update(torch.randn(500, 3))
    linear, ensemble = torch.nn.Linear(5, 4), EnsembleLinear(2, 5, 4)  # 3 normalised inputs, then 2 others
    x, extra = torch.randn(64, 3) * 2 + 1, torch.randn(64, 2)

    def outputs():
        z = torch.cat([norm(x), extra], dim=1)
        return linear(z), ensemble(z)

    before = outputs()
    for _ in range(5):
        norm.update_preserving(torch.randn(200, 3) * 3 + 4, [linear, ensemble])
    assert norm.mean.min() > 2.0  # the statistics did move (from about 0) ...
    for a, b in zip(before, outputs(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)  # ... the outputs did not
    norm.update(torch.randn(200, 3) * 3 + 4)  # a plain update moves them
    assert (outputs()[0] - before[0]).abs().max() > 0.05


def test_sac_obs_norm_preserve_holds_the_policy_and_critics_through_online_statistics():
    from robot_rl.agents.sac import SAC, NetworkConfig, SACConfig

    torch.manual_seed(0)
    cfg = SACConfig(network=NetworkConfig(hidden_dims=[32, 32], obs_norm=True, obs_norm_preserve=True, actor_layer_norm=True))
    agent = SAC(4, 2, cfg)
    agent.observe_dataset(torch.randn(300, 4), torch.zeros(300))
    obs, action = torch.randn(16, 4), torch.rand(16, 2) * 2 - 1
    with torch.no_grad():
        before = (agent.actor(obs, deterministic=True)[0], agent.critic(obs, action), agent.critic_target(obs, action))
        for _ in range(20):
            agent.observe({"state": torch.randn(8, 4) * 2 + 3}, torch.zeros(8), torch.zeros(8, dtype=torch.bool))
        after = (agent.actor(obs, deterministic=True)[0], agent.critic(obs, action), agent.critic_target(obs, action))
    assert float(agent.obs_norm.mean.mean()) > 1.0
    for a, b in zip(before, after, strict=True):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    with pytest.raises(ValueError, match="obs_norm_preserve=true needs agent.network.obs_norm=true"):
        SACConfig(network=NetworkConfig(obs_norm_preserve=True)).validate()
    with pytest.raises(ValueError, match="needs agent.network.obs_norm=true and agent.network.kind=mlp"):
        SACConfig(network=NetworkConfig(obs_norm=True, obs_norm_preserve=True, kind="hyper")).validate()
