"""DSRL: one denoising per executed chunk, env steps count executed actions, stored noise reproduces the chunk."""

import pytest
import torch
from robot_rl.policies.flow import FlowPolicy
from scripted_env import ScriptedEnv

from robot_rl.agents.sac import CriticConfig, NetworkConfig, OptimiserConfig, SACConfig
from robot_rl.finetune.dsrl import DSRL, DSRLConfig

SAC_CFG = SACConfig(network=NetworkConfig(hidden_dims=[32, 32]), optimiser=OptimiserConfig(batch_size=4))


def make(env, learning_starts: int = 6, aliased: bool = False) -> DSRL:
    torch.manual_seed(0)
    base = FlowPolicy(3, 2, horizon=4, execute=3, hidden=[16], num_inference_steps=2)
    cfg = DSRLConfig(noise_bound=1.5, learning_starts=learning_starts, aliased=aliased)
    return DSRL(cfg, SAC_CFG, base, env, capacity=1000)


def test_denoises_once_per_executed_chunk_and_counts_executed_actions() -> None:
    env = ScriptedEnv([4, 7], [True, False])  # chunks play 3 actions; episodes end mid-chunk
    m = make(env)
    rows, calls = [], []
    real = m.base.chunk_from_features

    def counting(state, noise=None, deterministic=False, num_steps=None):
        rows.append(state.shape[0])
        calls.append(state.clone())
        return real(state, noise, deterministic, num_steps)

    m.base.chunk_from_features = counting
    m.start(seed=0)
    for _ in range(14):
        m.advance()
    assert m.env_steps == 14 * 2  # executed actions, not chunks
    # env 0 (episodes of 4): decisions at t = 0, 3, 4, 7, 8, 11, 12 -> 7; env 1 (7): t = 0, 3, 6, 7, 10, 13 -> 6
    assert sum(rows) == m.runner.decisions == 13
    # every denoising was for an env that needed a chunk, on the state it was at: no second pass
    decided_at = torch.cat(calls)
    assert decided_at[:, 1].tolist().count(0) == 4 + 2  # every episode's first step (env 0: 4 starts, env 1: 2)


def test_stored_noise_reproduces_the_executed_chunk() -> None:
    env = ScriptedEnv([9], [False])
    m = make(env, learning_starts=100)
    m.start(seed=0)
    for _ in range(3):
        m.advance()
    executed = torch.stack(env.actions)[:, 0]  # [3, A]: one whole chunk
    w = m.replay.action[0, 0]
    state = m.replay.obs["state"][0, 0]
    assert (w.abs() <= 1).all()
    chunk = m.denoise(state[None], w[None])[0]
    assert torch.allclose(chunk[:3], executed)
    assert m.replay.reward[0, 0] == pytest.approx(1 + 0.99 * 2 + 0.99**2 * 3)


def test_needs_one_step_returns_and_a_bounded_noise() -> None:
    env = ScriptedEnv([4], [True])
    base = FlowPolicy(3, 2, horizon=4, hidden=[16])
    with pytest.raises(ValueError, match="n_step"):
        DSRL(DSRLConfig(), SACConfig(critic=CriticConfig(n_step=3)), base, env, capacity=100)
    with pytest.raises(ValueError, match="dsrl.noise_bound"):
        DSRLConfig(noise_bound=0.0).validate()


def test_the_evaluated_policy_starts_as_the_base_policy_with_zero_noise() -> None:
    env = ScriptedEnv([5, 8], [True, False])
    m = make(env)
    act, on_done = m.eval_policy()
    obs = env.reset()
    expected = m.base.predict_chunk(obs["state"], deterministic=True)[:, 0]
    assert torch.allclose(act(obs), expected, atol=1e-6)


def test_aliased_replay_stores_the_executed_actions() -> None:
    env = ScriptedEnv([9], [False])
    m = make(env, learning_starts=100, aliased=True)
    m.start(seed=0)
    for _ in range(6):
        m.advance()
    executed = torch.stack(env.actions)[:, 0]  # [6, A]: two whole chunks of 3
    assert m.replay.action.shape[-1] == 3 * 2
    assert torch.equal(m.replay.action[:2, 0], executed.view(2, 6))


def test_aliased_noise_critic_is_distilled_from_the_action_critic() -> None:
    env = ScriptedEnv([5, 7], [True, False])
    m = make(env, learning_starts=0, aliased=True)
    m.start(seed=0)
    for _ in range(40):  # fill the buffer with a few transitions
        m.advance()
    state = m.replay.obs["state"][: len(m.replay), 0]
    w = torch.rand(state.shape[0], m.noise_dim) * 2 - 1  # noises that were never executed

    def gap() -> float:
        with torch.no_grad():
            q_action = m.action_critic(state, m.executed(state, w)).mean(0)
            return (m.agent.critic(state, w).mean(0) - q_action).abs().mean().item()

    for group in m.action_critic_opt.param_groups:  # hold Q^A still: what moves is the distillation alone
        group["lr"] = 0.0
    before, updates = gap(), m.updates
    for _ in range(800):
        metrics = m.update_aliased(m.replay.sample(32).reshape(1, 32))
    assert m.updates == updates  # update_aliased itself does not count env-driven updates
    assert {"critic_loss", "distill_loss", "q_mean", "actor_loss", "temperature"} <= metrics.keys()
    assert gap() < 0.3 * before, (before, gap())


def test_aliased_state_round_trips_through_a_checkpoint() -> None:
    env = ScriptedEnv([5, 7], [True, False])
    m = make(env, learning_starts=0, aliased=True)
    m.start(seed=0)
    for _ in range(20):
        m.advance()
    assert m.updates > 0
    copy = make(ScriptedEnv([5, 7], [True, False]), learning_starts=0, aliased=True)
    copy.load_state_dict(m.state_dict())
    state, action = m.replay.obs["state"][:4, 0], m.replay.action[:4, 0]
    assert torch.equal(copy.action_critic(state, action), m.action_critic(state, action))
    assert torch.equal(copy.action_critic_target(state, action), m.action_critic_target(state, action))
    assert len(copy.replay) == len(m.replay) and copy.env_steps == m.env_steps
