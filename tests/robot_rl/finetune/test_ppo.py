"""PPO over chain decisions: macro-step GAE, the two ratio losses, the rollout bookkeeping, checkpoints."""

from __future__ import annotations

import io
import math
from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import Tensor, nn

from robot_rl import envs
from robot_rl.evaluation import evaluate
from robot_rl.finetune.chunks import MacroStep
from robot_rl.finetune.ppo import PPO, PPOConfig, clipped_surrogate


class ChainSample(NamedTuple):
    chunk: Tensor
    chain: Tensor
    log_prob: Tensor


class GaussianChain(nn.Module):
    """A fake chain policy: x_0 = 0, x_{k+1} ~ N((x_k + W s + b) / 2, std^2), chunk = clamp(x_S)."""

    def __init__(self, obs_dim: int, action_dim: int, horizon: int = 4, execute: int = 2, steps: int = 2,
                 std: float = 0.3) -> None:
        super().__init__()
        self.obs_dim, self.action_dim, self.horizon, self.execute = obs_dim, action_dim, horizon, execute
        self.num_chain_steps = steps
        self.mean = nn.Linear(obs_dim, horizon * action_dim)
        nn.init.zeros_(self.mean.weight)
        nn.init.zeros_(self.mean.bias)
        self.log_std = nn.Parameter(torch.tensor(math.log(std)))
        self.sample_sizes: list[int] = []

    def _mu(self, state: Tensor, x: Tensor) -> Tensor:  # x [B, ..., H, A]
        m = self.mean(state).view(state.shape[0], *([1] * (x.dim() - 3)), self.horizon, self.action_dim)
        return 0.5 * (x + m)

    @torch.no_grad()
    def sample(self, state: Tensor, deterministic: bool = False) -> ChainSample:
        self.sample_sizes.append(state.shape[0])
        x = state.new_zeros(state.shape[0], self.horizon, self.action_dim)
        chain, log_probs = [x], []
        for _ in range(self.num_chain_steps):
            mu = self._mu(state, x)
            x = mu if deterministic else mu + self.log_std.exp() * torch.randn_like(mu)
            log_probs.append(torch.distributions.Normal(mu, self.log_std.exp()).log_prob(x).sum((-1, -2)))
            chain.append(x)
        return ChainSample(x.clamp(-1, 1), torch.stack(chain, 1), torch.stack(log_probs, 1))

    def log_prob(self, state: Tensor, chain: Tensor) -> Tensor:
        mu = self._mu(state, chain[:, :-1])
        return torch.distributions.Normal(mu, self.log_std.exp()).log_prob(chain[:, 1:]).sum((-1, -2))

    def entropy(self, state: Tensor, chain: Tensor) -> Tensor:
        per_dim = 0.5 * math.log(2 * math.pi * math.e) + self.log_std
        return (per_dim * self.horizon * self.action_dim).expand(chain.shape[0], self.num_chain_steps)

    def policy_parameters(self) -> list[nn.Parameter]:
        return list(self.parameters())


class ToyReach(envs.BatchedEnv):
    """Hit a per-episode target with a 1-D action; env i's episodes last 3 + i steps (so envs desynchronise)."""

    def __init__(self, num_envs: int, vary_length: bool = True) -> None:
        self.num_envs, self.device, self.spec = num_envs, torch.device("cpu"), "toy:reach"
        self.observation_spec = {"state": ((2,), torch.float32)}
        self.action_dim, self.max_episode_steps = 1, None
        self.single_observation_space = gym.spaces.Box(-1, 1, (2,), np.float32)
        self.single_action_space = gym.spaces.Box(-1, 1, (1,), np.float32)
        self.length = 3 + torch.arange(num_envs) if vary_length else torch.full((num_envs,), 4)
        self.gen = torch.Generator()

    def _new(self, mask: Tensor) -> None:
        self.target = torch.where(mask, torch.rand(self.num_envs, generator=self.gen) * 1.6 - 0.8, self.target)
        self.t, self.ret = self.t.masked_fill(mask, 0), self.ret.masked_fill(mask, 0.0)

    def _obs(self) -> Tensor:
        return torch.stack([self.target, self.t / self.length], 1)

    def reset(self, seed: int | None = None) -> dict[str, Tensor]:
        if seed is not None:
            self.gen.manual_seed(seed)
        self.target, self.t, self.ret = torch.zeros(self.num_envs), torch.zeros(self.num_envs), torch.zeros(self.num_envs)
        self._new(torch.ones(self.num_envs, dtype=torch.bool))
        return {"state": self._obs()}

    def step(self, action: Tensor):
        err = action[:, 0].clamp(-1, 1) - self.target
        reward = -err.pow(2)
        self.t, self.ret = self.t + 1, self.ret + reward
        truncated = self.t >= self.length
        final, ep_return, ep_length = self._obs(), torch.where(truncated, self.ret, 0.0), self.t * truncated
        self._new(truncated)
        info = {"final_obs": {"state": final}, "episode_return": ep_return, "episode_length": ep_length,
                "success": err.abs() < 0.1}
        return {"state": self._obs()}, reward, torch.zeros_like(truncated), truncated, info

    def render(self, index: int = 0) -> np.ndarray:
        raise RuntimeError("no rendering")

    def close(self) -> None:
        pass


def _macro(env_ids, v, reward, k, terminated, truncated, next_v, gamma) -> MacroStep:
    """Rows whose state is [V, 0] (the test's critic reads V off the first coordinate)."""
    m, t = len(env_ids), torch.tensor(terminated)
    length = torch.tensor(k)
    return MacroStep(
        env_ids=torch.tensor(env_ids), obs=torch.tensor([[x, 0.0] for x in v]), reward=torch.tensor(reward),
        discount=torch.where(t, 0.0, gamma ** length.float()), next_obs=torch.tensor([[x, 0.0] for x in next_v]),
        terminated=t, truncated=torch.tensor(truncated), length=length,
        payload={"chain": torch.zeros(m, 3, 4, 1), "log_prob": torch.zeros(m, 2)},
    )


def test_gae_over_macro_steps_matches_a_hand_computation() -> None:
    g, lam = 0.9, 0.8
    ppo = PPO(PPOConfig(gamma=g, gae_lambda=lam), GaussianChain(2, 1), ToyReach(2), seed=0)
    ppo.value = nn.Linear(2, 1)  # V(s) = s[0]
    with torch.no_grad():
        ppo.value.weight.copy_(torch.tensor([[1.0, 0.0]]))
        ppo.value.bias.zero_()
    macros = [  # completion order; env 0: a, b (terminates after k=1), c; env 1: d, e (time limit after k=1), f
        _macro([0, 1], [1.0, 0.3], [0.5, 1.0], [2, 2], [False, False], [False, False], [2.0, 0.4], g),
        _macro([0, 1], [2.0, 0.4], [1.5, -0.2], [1, 1], [True, False], [False, True], [9.0, 5.0], g),
        _macro([0], [0.7], [0.1], [2], [False], [False], [0.6], g),
        _macro([1], [1.1], [0.3], [2], [False], [False], [-1.0], g),
    ]
    b = ppo._batch(macros)
    da, dd = 0.5 + g**2 * 2.0 - 1.0, 1.0 + g**2 * 0.4 - 0.3
    db, de = 1.5 - 2.0, -0.2 + g * 5.0 - 0.4  # termination: no bootstrap; truncation: bootstrap from final obs
    dc, df = 0.1 + g**2 * 0.6 - 0.7, 0.3 + g**2 * -1.0 - 1.1  # last rows of the batch: bootstrapped, no tail
    expected = [da + g**2 * lam**2 * db, dd + g**2 * lam**2 * de, db, de, dc, df]  # A stops at episode ends
    torch.testing.assert_close(b["adv"], torch.tensor(expected))
    torch.testing.assert_close(b["ret"], torch.tensor(expected) + torch.tensor([1.0, 0.3, 2.0, 0.4, 0.7, 1.1]))


def test_joint_and_per_step_ratio_losses_on_hand_numbers() -> None:
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.1, 0.05], [-0.3, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    # joint: log r = [0.15, -0.3]; both ratios leave [0.9, 1.1] in the direction that the clip cuts off
    loss, kl, cf = clipped_surrogate(new, old, adv, torch.tensor(0.1), joint=True)
    assert loss.item() == pytest.approx(-(1.1 * 1.0 + 0.9 * -2.0) / 2)
    r = torch.tensor([0.15, -0.3]).exp()
    assert kl.item() == pytest.approx(((r - 1) - r.log()).mean().item())
    assert cf.item() == 1.0
    # per_step with clip_growth 2 over S = 2 steps: c = [0.05, 0.1]; each transition is its own sample
    ppo = PPO(PPOConfig(ratio="per_step", clip=0.1, clip_growth=2.0), GaussianChain(2, 1), ToyReach(2), seed=0)
    torch.testing.assert_close(ppo.clip, torch.tensor([0.05, 0.1]))
    loss, _, cf = clipped_surrogate(new, old, adv, ppo.clip, joint=False)
    assert loss.item() == pytest.approx(-(1.05 + math.exp(0.05) - 0.95 * 2 - 2.0) / 4)
    assert cf.item() == 0.5
    # gradient only where unclipped: d loss / d new_lp = -r A / 4 for steps (0, 1) and (1, 1)
    new.requires_grad_(True)
    clipped_surrogate(new, old, adv, ppo.clip, joint=False)[0].backward()
    torch.testing.assert_close(new.grad, torch.tensor([[0.0, -math.exp(0.05) / 4], [0.0, 0.5]]))


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="ppo.ratio"):
        PPOConfig(ratio="chain").validate()
    with pytest.raises(ValueError, match="ppo.target_kl"):
        PPOConfig(target_kl=0.0).validate()


def _small_cfg(**kw) -> PPOConfig:
    return PPOConfig(**{"rollout_steps": 10, "epochs": 2, "minibatch_size": 8, "critic_hidden": [16], **kw})


def test_advance_on_pendulum_counts_env_steps_and_decisions() -> None:
    env = envs.make("gym:Pendulum-v1", num_envs=4, max_episode_steps=7)  # 7 = 2 + 2 + 2 + 1: a short last chunk
    chain = GaussianChain(3, 1, horizon=4, execute=2)
    ppo = PPO(_small_cfg(ratio="per_step", entropy_coef=0.01, target_kl=10.0), chain, env, seed=0)
    m1 = ppo.advance()
    assert ppo.env_steps == 4 * 10 and sum(chain.sample_sizes) == ppo.decisions
    m2 = ppo.advance()
    assert ppo.env_steps == 2 * 4 * 10 and sum(chain.sample_sizes) == ppo.decisions == 4 * (4 + 4 + 3)  # 4 chunks/episode
    for m in (m1, m2):
        scalars = {k: v for k, v in m.items() if k != "episode_return"}
        assert all(isinstance(v, float) and math.isfinite(v) for v in scalars.values()), scalars
        assert {"policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction"} <= scalars.keys()
    assert m1["macro_steps"] == 4 * 5 and m1["episode_return"].shape == (4,)  # each env ended a 7-step episode
    assert "success" not in m1  # pendulum reports no success
    env.close()


def test_only_envs_that_need_a_chunk_are_sampled() -> None:
    env = ToyReach(4)  # episodes of 3, 4, 5, 6 steps: the envs fall out of step
    chain = GaussianChain(2, 1)
    ppo = PPO(_small_cfg(rollout_steps=12, critic_warmup_iterations=1), chain, env, seed=0)
    before = [p.clone() for p in chain.parameters()]
    m = ppo.advance()
    assert all(torch.equal(a, b) for a, b in zip(before, chain.parameters(), strict=True))  # critic warm-up: actor frozen
    assert "policy_loss" not in m and math.isfinite(m["value_loss"])
    assert sum(chain.sample_sizes) == ppo.decisions and min(chain.sample_sizes) < 4
    # ceil(n / 2) chunks per n-step episode over 12 steps: n=3: 4 * 2, n=4: 3 * 2, n=5: 2 * 3 + 1, n=6: 2 * 3
    assert ppo.decisions == 8 + 6 + 7 + 6
    assert m["success"].shape == m["episode_return"].shape == (4 + 3 + 2 + 2,)  # one value per ended episode
    assert ((m["success"] == 0) | (m["success"] == 1)).all()
    ppo.advance()
    assert any(not torch.equal(a, b) for a, b in zip(before, chain.parameters(), strict=True))


def test_ppo_learns_the_toy_task_and_evaluates_with_a_chunker() -> None:
    torch.manual_seed(0)
    env, eval_env = ToyReach(16, vary_length=False), ToyReach(8, vary_length=False)
    chain = GaussianChain(2, 1, std=0.2)
    cfg = _small_cfg(rollout_steps=16, epochs=4, minibatch_size=32, actor_lr=3e-2, clip=0.2, critic_lr=1e-2)
    ppo = PPO(cfg, chain, env, seed=0)
    act, on_done = ppo.eval_policy()
    before = evaluate(act, eval_env, seed=1, on_done=on_done)["eval_return_mean"]
    for _ in range(15):
        ppo.advance()
    act, on_done = ppo.eval_policy()
    after = evaluate(act, eval_env, seed=1, on_done=on_done)["eval_return_mean"]
    assert before < -0.5 and after > 0.1 * before, (before, after)  # typically -0.72 -> -0.005


def test_state_dict_round_trip() -> None:
    torch.manual_seed(0)
    a = PPO(_small_cfg(), GaussianChain(2, 1), ToyReach(3), seed=0)
    a.advance()
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    b = PPO(_small_cfg(), GaussianChain(2, 1, std=0.5), ToyReach(3), seed=1)
    b.load_state_dict(torch.load(io.BytesIO(buf.getvalue())))
    pa, pb = [*a.chain_policy.parameters(), *a.value.parameters()], [*b.chain_policy.parameters(), *b.value.parameters()]
    for x, y in zip(pa, pb, strict=True):
        torch.testing.assert_close(x, y)
    assert (b.iteration, b.env_steps, b.decisions) == (a.iteration, a.env_steps, a.decisions) != (0, 0, 0)
    sa, sb = a.actor_opt.state_dict()["state"], b.actor_opt.state_dict()["state"]
    torch.testing.assert_close(sa[0]["exp_avg"], sb[0]["exp_avg"])
    b.advance()  # resumes: the optimisers continue from the loaded moments
    assert b.iteration == 2


def test_per_dim_ratio_averages_the_log_ratio_over_dimensions_and_steps() -> None:
    from robot_rl.finetune.ppo import clipped_surrogate

    old = torch.zeros(1, 2)
    new = torch.tensor([[8 * 0.1, 8 * 0.3]])  # summed over D = 8 dims per step
    adv = torch.ones(1)
    loss, _, _ = clipped_surrogate(new, old, adv, torch.tensor(1.0), joint=True, per_dim=8)
    assert loss.item() == pytest.approx(-torch.tensor(0.2).exp().item(), rel=1e-6)
    loss, _, _ = clipped_surrogate(new, old, adv, torch.tensor([1.0, 1.0]), joint=False, per_dim=8)
    assert loss.item() == pytest.approx(-(torch.tensor([0.1, 0.3]).exp().mean()).item(), rel=1e-6)
