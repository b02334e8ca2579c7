"""Cal-QL / CQL and IQL against direct computations, and the pieces RLPD mixing relies on."""

from __future__ import annotations

import math

import pytest
import torch

from robot_rl.agents.calql import CalQL, CalQLConfig
from robot_rl.agents.iql import IQL, IQLConfig, expectile_loss
from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.replay import Batch, ReplayBuffer

OBS, ACT, B = 5, 2, 16


def _agent(seed: int = 0, **groups: dict) -> SAC:
    torch.manual_seed(seed)
    return SAC(OBS, ACT, SACConfig.from_dict({"network": {"hidden_dims": [32, 32]}, **groups}))


def _batch(seed: int = 1) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs={"state": torch.randn(B, OBS, generator=g)},
        action=torch.rand(B, ACT, generator=g) * 2 - 1,
        reward=torch.rand(B, generator=g),
        next_obs={"state": torch.randn(B, OBS, generator=g)},
        discount=torch.full((B,), 0.99),
    )


@pytest.mark.parametrize("calibrated", [True, False])
def test_conservative_gap_matches_per_sample_reference(calibrated: bool) -> None:
    sac = _agent(critic=dict(num=3))
    cfg = CalQLConfig(num_action_samples=3, cql_temperature=0.7)
    learner = CalQL(sac, cfg, calibrated=calibrated)
    batch = _batch()
    obs, next_obs = batch.obs["state"], batch.next_obs["state"]
    mc_return = torch.linspace(-1.0, 2.0, B)  # some bounds bind, some do not
    with torch.no_grad():
        q_data = sac.critic(obs, batch.action)
        torch.manual_seed(5)
        gap, _ = learner._conservative_gap(obs, next_obs, q_data, mc_return)
    # The reference draws the same samples (same seed, same order: pi(s), pi(s'), uniform) and then evaluates
    # the paper's formula one state, one critic and one action at a time.
    n = cfg.num_action_samples
    torch.manual_seed(5)
    with torch.no_grad():
        a_cur, logp_cur = sac.actor(obs.repeat_interleave(n, 0))
        a_next, logp_next = sac.actor(next_obs.repeat_interleave(n, 0))
        a_rand = torch.rand(B * n, ACT) * 2 - 1
        e_count = q_data.shape[0]
        ref = torch.zeros(e_count)
        for b in range(B):
            rows = range(b * n, (b + 1) * n)
            for e in range(e_count):
                vals = []
                for r in rows:
                    vals.append(sac.critic(obs[b : b + 1], a_rand[r : r + 1])[e, 0] + ACT * math.log(2.0))
                for acts, logps in ((a_cur, logp_cur), (a_next, logp_next)):
                    for r in rows:
                        q = sac.critic(obs[b : b + 1], acts[r : r + 1])[e, 0]
                        if calibrated:
                            q = torch.maximum(q, mc_return[b])
                        vals.append(q - logps[r])
                soft = torch.logsumexp(torch.stack(vals) / 0.7, 0) * 0.7
                ref[e] += (soft - q_data[e, b]) / B
    torch.testing.assert_close(gap, ref, rtol=1e-5, atol=1e-5)


def test_calibration_only_raises_the_gap() -> None:
    """Clamping policy Q-values from below can only increase the soft maximum, so Cal-QL's gap >= CQL's."""
    sac = _agent(critic=dict(num=2))
    batch = _batch()
    obs, next_obs = batch.obs["state"], batch.next_obs["state"]
    with torch.no_grad():
        q_data = sac.critic(obs, batch.action)
        torch.manual_seed(3)
        cql, _ = CalQL(sac, CalQLConfig(), calibrated=False)._conservative_gap(obs, next_obs, q_data, torch.zeros(B))
        torch.manual_seed(3)
        calql, _ = CalQL(sac, CalQLConfig(), calibrated=True)._conservative_gap(
            obs, next_obs, q_data, torch.full((B,), 10.0)
        )
    assert torch.all(calql > cql + 1.0)


def test_cql_pushes_dataset_actions_above_other_actions() -> None:
    """On a fixed batch, the conservative term makes Q(s, a_data) exceed Q at random actions."""
    sac = _agent(critic=dict(num=2), optimiser=dict(critic_lr=1e-3))
    learner = CalQL(sac, CalQLConfig(cql_alpha=5.0), calibrated=False)
    batch = _batch()
    batch.reward.zero_()
    obs = batch.obs["state"]

    def margin() -> float:
        with torch.no_grad():
            q_data = sac.critic(obs, batch.action).mean()
            q_rand = sac.critic(obs, torch.rand(B, ACT) * 2 - 1).mean()
        return float(q_data - q_rand)

    torch.manual_seed(0)
    for _ in range(200):
        metrics = learner.update(batch, torch.zeros(B))
    assert margin() > 0.5
    assert all(torch.isfinite(v).all() for v in metrics.values())


def test_iql_expectile_value_and_weighted_regression() -> None:
    sac = _agent(critic=dict(num=2), optimiser=dict(critic_lr=1e-3, actor_lr=1e-3))
    learner = IQL(sac, IQLConfig(expectile=0.9))
    batch = _batch()
    torch.manual_seed(0)
    with torch.no_grad():
        before = sac.actor.log_prob(batch.obs["state"], batch.action).mean()
    for _ in range(300):
        metrics = learner.update(batch)
    with torch.no_grad():
        after = sac.actor.log_prob(batch.obs["state"], batch.action).mean()
    assert after > before + 1.0  # the actor moved towards the dataset actions
    assert all(torch.isfinite(val).all() for val in metrics.values())


@pytest.mark.parametrize("tau", [0.5, 0.7, 0.9])
def test_expectile_loss_is_minimised_by_the_expectile(tau: float) -> None:
    """Fitting a constant to samples with the IQL value loss gives the tau-expectile, i.e. the m that solves
    tau * E[(x - m)+] = (1 - tau) * E[(m - x)+] (found here by bisection)."""
    x = torch.linspace(0, 1, 401).pow(3)  # a skewed sample: its expectiles differ clearly from its mean
    lo, hi = 0.0, 1.0
    for _ in range(60):
        m = (lo + hi) / 2
        above, below = (x - m).clamp(min=0).mean(), (m - x).clamp(min=0).mean()
        lo, hi = (m, hi) if tau * above > (1 - tau) * below else (lo, m)
    v = torch.zeros((), requires_grad=True)
    opt = torch.optim.Adam([v], lr=0.01)
    for _ in range(3000):
        loss = expectile_loss(x - v, tau)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert abs(v.item() - lo) < 2e-3, (v.item(), lo)


def test_iql_config_errors() -> None:
    with pytest.raises(ValueError, match="expectile"):
        IQLConfig(expectile=1.5).validate()
    with pytest.raises(ValueError, match="num_action_samples"):
        CalQLConfig(num_action_samples=0).validate()


def test_actor_log_prob_of_given_actions_matches_sampling() -> None:
    torch.manual_seed(0)
    sac = _agent()
    obs = torch.randn(64, OBS)
    action, log_prob = sac.actor(obs)
    torch.testing.assert_close(sac.actor.log_prob(obs, action), log_prob, rtol=1e-3, atol=1e-3)


def test_extend_equals_adding_one_step_at_a_time() -> None:
    spec = {"state": ((3,), torch.float32)}
    g = torch.Generator().manual_seed(0)
    m = 11
    obs, nxt = torch.randn(m, 3, generator=g), torch.randn(m, 3, generator=g)
    action, reward = torch.rand(m, 2, generator=g), torch.randn(m, generator=g)
    terminated = torch.zeros(m, dtype=torch.bool)
    truncated = torch.zeros(m, dtype=torch.bool)
    terminated[4], truncated[m - 1] = True, True
    a = ReplayBuffer(8, 1, spec, 2, gamma=0.9, n_step=3)
    b = ReplayBuffer(8, 1, spec, 2, gamma=0.9, n_step=3)
    a.extend({"state": obs}, action, reward, {"state": nxt}, terminated, truncated)
    for i in range(m):
        b.add({"state": obs[i : i + 1]}, action[i : i + 1], reward[i : i + 1], {"state": nxt[i : i + 1]},
              terminated[i : i + 1], truncated[i : i + 1])
    assert len(a) == len(b) == 8
    envs = torch.zeros(8, dtype=torch.long)
    # Same transitions in the same time order, oldest first (the physical rows differ after wrapping).
    oldest_first = [(buf._pos + torch.arange(8)) % buf.T for buf in (a, b)]
    x, y = a._gather(oldest_first[0], envs), b._gather(oldest_first[1], envs)
    for name in ("action", "reward", "discount"):
        torch.testing.assert_close(getattr(x, name), getattr(y, name))
    torch.testing.assert_close(x.next_obs["state"], y.next_obs["state"])


def test_batch_cat_along_utd_minibatches() -> None:
    def batch(value: float, b: int) -> Batch:
        return Batch({"state": torch.full((2 * b, 1), value)}, torch.full((2 * b, 1), value),
                     torch.full((2 * b,), value), {"state": torch.full((2 * b, 1), value)}, torch.ones(2 * b))

    mixed = Batch.cat([batch(1.0, 3).reshape(2, 3), batch(2.0, 5).reshape(2, 5)], dim=1)
    assert mixed.reward.shape == (2, 8)
    for i in range(2):  # each of the utd minibatches holds both sources in the set ratio
        assert (mixed.index(i).reward == 1.0).sum() == 3 and (mixed.index(i).reward == 2.0).sum() == 5
