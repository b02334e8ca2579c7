import copy

import pytest
import torch

from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.replay import Batch


def _batch(n: int, obs_dim: int = 4, act_dim: int = 2, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs={"state": torch.randn(n, obs_dim, generator=g)},
        action=torch.rand(n, act_dim, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g),
        next_obs={"state": torch.randn(n, obs_dim, generator=g)},
        discount=torch.full((n,), 0.99),
    )


def _critic_loss(agent: SAC, b: Batch) -> float:
    with torch.no_grad():
        next_action, next_log_prob = agent.actor(b.next_obs["state"])
        next_v = agent.critic_target(b.next_obs["state"], next_action).min(0).values
        next_v = next_v - agent.log_alpha.exp() * next_log_prob
        target = b.reward + b.discount * next_v
        return ((agent.critic(b.obs["state"], b.action) - target) ** 2).mean().item()


@pytest.mark.parametrize("num_critics", [2, 10])
def test_update_lowers_critic_loss_on_fixed_batch(num_critics):
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(num_critics=num_critics, hidden_dims=[64, 64], utd=4))
    b = _batch(256)
    before = _critic_loss(agent, b)
    for _ in range(50):
        metrics = agent.update(Batch.cat([b] * 4).reshape(4, 256))
    after = _critic_loss(agent, b)
    assert after < 0.5 * before, (before, after)
    assert set(metrics) >= {"critic_loss", "actor_loss", "temperature", "entropy", "q_mean"}
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


def test_utd_runs_that_many_critic_updates_and_one_actor_update():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[16], utd=3))
    steps = {"critic": 0, "actor": 0}
    agent.critic_opt.register_step_post_hook(lambda *_: steps.__setitem__("critic", steps["critic"] + 1))
    agent.actor_opt.register_step_post_hook(lambda *_: steps.__setitem__("actor", steps["actor"] + 1))
    agent.update(_batch(3 * 32).reshape(3, 32))
    assert steps == {"critic": 3, "actor": 1}


def test_terminal_discount_zero_removes_bootstrap():
    """With discount 0 the TD target is the reward alone: the critic regresses onto it exactly."""
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[64, 64], critic_lr=3e-3))
    b = _batch(64)
    b.discount.zero_()
    for _ in range(300):
        agent._update_critic(b)
    q = agent.critic(b.obs["state"], b.action)
    assert (q - b.reward).abs().mean() < 0.1


def test_target_critics_track_critics_with_polyak():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[16], tau=0.5))
    old_target = copy.deepcopy(agent.critic_target.state_dict())
    agent._update_critic(_batch(32))
    for name, p in agent.critic.state_dict().items():
        expected = 0.5 * old_target[name] + 0.5 * p
        torch.testing.assert_close(agent.critic_target.state_dict()[name], expected)


def test_temperature_moves_toward_target_entropy():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[16], temperature_lr=1e-2, target_entropy_scale=10.0))
    # target entropy -20 is far below the initial policy's entropy: alpha must shrink
    alpha0 = agent.log_alpha.exp().item()
    for _ in range(20):
        agent.update(_batch(32).reshape(1, 32))
    assert agent.log_alpha.exp().item() < alpha0


def test_state_dict_round_trip_restores_behaviour():
    torch.manual_seed(0)
    a = SAC(4, 2, SACConfig(hidden_dims=[16], num_critics=3))
    for _ in range(3):
        a.update(_batch(32).reshape(1, 32))
    b = SAC(4, 2, SACConfig(hidden_dims=[16], num_critics=3))
    b.load_state_dict(a.state_dict())
    obs = {"state": torch.randn(5, 4)}
    torch.testing.assert_close(a.act(obs, deterministic=True), b.act(obs, deterministic=True))
    torch.manual_seed(1)
    ma = a.update(_batch(32, seed=3).reshape(1, 32))
    torch.manual_seed(1)
    mb = b.update(_batch(32, seed=3).reshape(1, 32))
    torch.testing.assert_close(ma["critic_loss"], mb["critic_loss"])


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"num_critics": 1}, "num_critics"),
        ({"num_target_critics": 5, "num_critics": 2}, "num_target_critics"),
        ({"utd": 0}, "utd"),
        ({"gamma": 1.5}, "gamma"),
    ],
)
def test_bad_config_names_the_field(bad, message):
    with pytest.raises(ValueError, match=message):
        SAC(4, 2, SACConfig(**bad))


def test_bf16_autocast_update_learns_and_keeps_fp32_weights():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[64, 64], bf16=True))
    b = _batch(256)
    before = _critic_loss(agent, b)
    for _ in range(50):
        metrics = agent.update(b.reshape(1, 256))
    assert _critic_loss(agent, b) < 0.5 * before
    assert all(p.dtype == torch.float32 for p in agent.critic.parameters())
    assert metrics["critic_loss"].dtype == torch.float32


@pytest.mark.slow
def test_compiled_update_matches_eager(monkeypatch):
    """Same seed, same batches: the compiled losses give the eager losses (up to float reassociation)."""
    import torch._inductor.config as inductor_config

    # Inductor draws random numbers its own way; make it use eager's generator so the two runs see the same noise.
    monkeypatch.setattr(inductor_config, "fallback_random", True)
    torch._dynamo.reset()
    results = []
    for compile_ in (False, True):
        torch.manual_seed(0)
        agent = SAC(4, 2, SACConfig(hidden_dims=[32, 32], num_critics=4, compile=compile_))
        losses = []
        for i in range(5):
            torch.manual_seed(100 + i)
            losses.append(agent.update(_batch(64, seed=i).reshape(1, 64))["critic_loss"])
        results.append(torch.stack(losses))
    torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CUDA graphs)")
def test_cuda_graph_update_outputs_survive_the_next_replay():
    """CUDA-graph replay reuses output memory: metrics returned by one update must not change after the next."""
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(hidden_dims=[32, 32], compile=True), device="cuda")
    first = None
    for i in range(4):
        m = agent.update(_batch(64, seed=i).to("cuda").reshape(1, 64))
        if i == 2:
            first = {k: v.clone() for k, v in m.items()}
            kept = m
    for k in first:
        torch.testing.assert_close(kept[k], first[k])
