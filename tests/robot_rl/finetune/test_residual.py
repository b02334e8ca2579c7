"""Residual RL: the zero start (executed action = base action), base resets at every episode boundary online
and while demos fill the prior buffer, the critic-only warm-up."""

import copy

import pytest
import torch
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.flow import FlowPolicy
from scripted_env import ScriptedEnv
from torch import Tensor

from robot_rl.agents.sac import CriticConfig, NetworkConfig, OptimiserConfig, SACConfig
from robot_rl.finetune.residual import ResidualConfig, ResidualRL, demo_features, demo_replay
from robot_rl.prior_data import OfflineData
from robot_rl.transitions import Transitions

SAC_CFG = SACConfig(network=NetworkConfig(hidden_dims=[32, 32]),
                    critic=CriticConfig(n_step=2),
                    optimiser=OptimiserConfig(batch_size=8))


def base_policy(seed: int = 0) -> MLPPolicy:
    torch.manual_seed(seed)
    return MLPPolicy(3, 2, horizon=4, execute=2, hidden=[16])


def method(env, **kw) -> ResidualRL:
    cfg = ResidualConfig(**{"scale": 0.2, "learning_starts": 4, "critic_warmup_updates": 6, **kw})
    torch.manual_seed(1)
    return ResidualRL(cfg, SAC_CFG, base_policy(), env, capacity=1000)


def test_the_first_executed_action_is_the_base_action() -> None:
    env = ScriptedEnv([5, 7], [True, False])
    m = method(env)
    reference = copy.deepcopy(m.base)
    act, on_done = m.eval_policy()
    obs = env.reset()
    for _ in range(6):  # across chunk boundaries and an episode end
        expected = reference.act(obs["state"], deterministic=True)
        executed = act(obs)
        assert torch.equal(executed, expected.clamp(-1, 1))
        obs, _, terminated, truncated, _ = env.step(executed)
        on_done(terminated | truncated)
        reference.reset(terminated | truncated)
    # and the training policy's residual is zero in the mean: only exploration noise moves it
    state = torch.cat([obs["state"], reference.act(obs["state"], deterministic=True)], 1)
    assert torch.equal(m.agent.act({"state": state}, deterministic=True), torch.zeros(2, 2))


def test_online_episodes_replan_the_base_from_their_first_observation() -> None:
    env = ScriptedEnv([3, 5], [True, True])
    m = method(env)
    m.start(seed=0)
    for step in range(1, 9):
        m.advance()
        ended = (env.t == 0) & (env.episodes > 0)  # the envs autoreset at this step
        assert bool(m.base.chunker.replanned[ended].all()), step


def test_demo_buffer_resets_the_base_per_episode() -> None:
    """Two demo episodes (3 and 6 steps) in one dataset: the base actions stored for the second must be
    those of a base that starts planning at its first frame, not the tail of the first episode's chunk."""
    torch.manual_seed(0)
    lengths = [3, 6]
    obs = torch.randn(sum(lengths), 3)
    terminated = torch.zeros(sum(lengths), dtype=torch.bool)
    terminated[2] = terminated[-1] = True
    t = Transitions({"state": obs}, torch.rand(sum(lengths), 2) * 2 - 1, torch.arange(sum(lengths)).float(),
                    {"state": obs + 1}, terminated, torch.zeros_like(terminated))
    data = OfflineData(t, torch.zeros(len(obs)), 2, None)
    base = base_policy()
    buffer = demo_replay(base, data, 0.5, True, 100, SAC_CFG, "cpu")
    expected = []
    reference = copy.deepcopy(base)
    for start, n in ((0, 3), (3, 6)):
        reference.reset()
        expected += [reference.act(obs[start + t : start + t + 1], deterministic=True)[0] for t in range(n)]
    expected = torch.stack(expected)
    stored = buffer.obs["state"][: len(obs), 0]
    assert torch.allclose(stored[:, :3], obs) and torch.allclose(stored[:, 3:], expected)
    residual = ((t.action - expected) / 0.5).clamp(-1, 1)
    assert torch.allclose(buffer.action[: len(obs), 0], residual)
    # the next state's base action: the following frame's, and at an episode's end a fresh plan from the final obs
    next_base = buffer.next_obs["state"][: len(obs), 0, 3:]
    assert torch.allclose(next_base[0], expected[1]) and torch.allclose(next_base[3], expected[4])
    reference.reset()
    assert torch.allclose(next_base[2], reference.predict_chunk(obs[2:3] + 1, deterministic=True)[0, 0])


def test_the_actor_waits_for_the_critic_warm_up() -> None:
    env = ScriptedEnv([6, 6], [True, False])
    m = method(env, learning_starts=8, critic_warmup_updates=6)
    actor0 = copy.deepcopy(m.agent.actor.state_dict())
    critic0 = copy.deepcopy(m.agent.critic.state_dict())
    m.start(seed=0)
    while m.updates < 6:
        m.advance()
    assert all(torch.equal(v, actor0[k]) for k, v in m.agent.actor.state_dict().items())
    assert any(not torch.equal(v, critic0[k]) for k, v in m.agent.critic.state_dict().items())
    m.advance()
    assert any(not torch.equal(v, actor0[k]) for k, v in m.agent.actor.state_dict().items())


def test_bad_settings_name_the_key() -> None:
    with pytest.raises(ValueError, match="residual.scale"):
        ResidualConfig(scale=0.0).validate()


def test_camera_demos_become_the_base_features_without_frames() -> None:
    """A camera base's demos are stored as its features (state + frozen camera features); a truncated episode's
    last step has no next frame, so it is dropped and the step before it ends the episode as a truncation."""
    torch.manual_seed(0)
    camera = {"pixels/front": [16, 16, 3]}
    base = FlowPolicy(3, 2, horizon=4, execute=2, hidden=[16], num_inference_steps=2, cameras=camera,
                      encoder={"feature_dim": 4, "channels": 4, "layers": 2, "shift_pad": 2})
    base.fit_normalization(torch.randn(20, 3), torch.rand(20, 2) * 2 - 1)
    base.eval()
    m = 7  # episode 0: steps 0-2, terminated; episode 1: steps 3-6, cut by the time limit
    obs, next_obs = torch.randn(m, 3), torch.randn(m, 3)
    frames = torch.randint(0, 256, (m, 16, 16, 3), dtype=torch.uint8)
    terminated, truncated = torch.zeros(m, dtype=torch.bool), torch.zeros(m, dtype=torch.bool)
    terminated[2], truncated[6] = True, True
    data = OfflineData(Transitions({"state": obs, "pixels/front": frames}, torch.rand(m, 2), torch.arange(m).float(),
                                   {"state": next_obs}, terminated, truncated), torch.zeros(m), 2, None,
                       episode_index=torch.tensor([0, 0, 0, 1, 1, 1, 1]))
    out = demo_features(base, data).transitions
    assert out.cameras == {} and out.size == 6 and out.obs["state"].shape[1] == base.features_dim == 3 + 4
    assert out.terminated.tolist() == [False, False, True, False, False, False]
    assert out.truncated.tolist() == [False, False, False, False, False, True]
    assert torch.equal(out.reward, torch.tensor([0.0, 1, 2, 3, 4, 5]))

    def features(state: Tensor, frame: int) -> Tensor:
        return base.features({"state": state[None], "pixels/front": frames[frame : frame + 1]})[0]

    torch.testing.assert_close(out.obs["state"][4], features(obs[4], 4))
    torch.testing.assert_close(out.next_obs["state"][4], features(next_obs[4], 5))  # the next step's frame
    torch.testing.assert_close(out.next_obs["state"][5], features(next_obs[5], 6))  # truncated: the episode's last frame
    with pytest.raises(ValueError, match="no pixels/wrist frames"):
        demo_features(FlowPolicy(3, 2, cameras={"pixels/wrist": [16, 16, 3]}), data)
