"""The observation-to-action delay (``envs.make(..., delay=)``, ``robot_rl.envs.delay``) on real arm physics."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from robot_rl.envs.arm import STATE_DIM as S
from robot_rl.envs.delay import ActionDelay, InFlightActions

from robot_rl import envs


def _actions(steps: int, n: int = 2, dim: int = 4, seed: int = 0) -> torch.Tensor:
    return torch.rand(steps, n, dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def test_a_delayed_env_applies_each_action_d_steps_late_in_the_physics():
    """The arm under a 3-step delay moves exactly as the undelayed arm given three zero actions first: the
    delay is in the simulation, not only in the bookkeeping."""
    d, steps = 3, 12
    acts = _actions(steps)
    with envs.make("arm:reach", num_envs=2, seed=0, delay=d) as delayed, envs.make("arm:reach", num_envs=2,
                                                                                    seed=0) as plain:
        delayed.reset()
        plain.reset()
        late = torch.cat([torch.zeros(d, 2, 4), acts])[:steps]
        for t in range(steps):
            obs_d, *_, info = delayed.step(acts[t])
            obs_p, *_ = plain.step(late[t])
            torch.testing.assert_close(info["applied_action"], late[t].clamp(-1, 1))
            torch.testing.assert_close(obs_d["state"], obs_p["state"])  # same size: not aware
        assert delayed.observation_spec == plain.observation_spec


def test_an_aware_env_appends_the_actions_in_flight_and_clears_them_at_an_episode_end():
    d = 2
    acts = _actions(40, n=1, seed=1)
    with envs.make("arm:reach", num_envs=1, seed=0, max_episode_steps=5,
                   delay=ActionDelay(steps=d, aware=True)) as env:
        (dim,), _ = env.observation_spec["state"]
        obs = env.reset()
        assert dim == S + d * 4 and obs["state"].shape == (1, dim)
        assert torch.count_nonzero(obs["state"][0, S:]) == 0  # nothing in flight at the start
        for t in range(5):
            obs, _, terminated, truncated, info = env.step(acts[t])
            flight = acts[max(0, t - 1):t + 1, 0].clamp(-1, 1)
            if t == 4:  # time limit: the final observation still sees the last two actions, the new episode none
                assert bool(truncated[0])
                torch.testing.assert_close(info["final_obs"]["state"][0, S:], flight.reshape(-1))
                assert torch.count_nonzero(obs["state"][0, S:]) == 0
            else:
                want = torch.cat([torch.zeros(max(0, 1 - t), 4), flight]).reshape(-1)
                torch.testing.assert_close(obs["state"][0, S:], want)


def test_a_delay_in_ms_uses_the_control_rate_and_a_drawn_delay_is_reproducible():
    with envs.make("arm:reach", num_envs=1, delay=ActionDelay(ms=250)) as env:
        assert env.control_dt == pytest.approx(0.05) and env.choices == (5,)  # 250 ms at 20 Hz
    delay = ActionDelay(sample_steps=(1, 3, 3, 4), aware=True)
    seen = []
    for _ in range(2):
        with envs.make("arm:reach", num_envs=4, seed=3, max_episode_steps=3, delay=delay) as env:
            draws = []
            env.reset()
            for _ in range(9):  # three episodes per sub-env
                obs, *_, info = env.step(torch.zeros(4, 4))
                draws.append(info["delay_steps"].tolist())
                assert torch.allclose(obs["state"][:, -1], env._delay.float() / 4)  # d / D after the actions
            seen.append(draws)
            assert env.observation_spec["state"][0] == (S + 4 * 4 + 1,)
    assert seen[0] == seen[1]
    assert {v for row in seen[0] for v in row} <= {1, 3, 4} and len({v for row in seen[0] for v in row}) > 1


def test_delay_options_fail_in_one_line_naming_the_key():
    with pytest.raises(ValueError, match=r"^env_delay\.steps must be an int >= 0"):
        ActionDelay(steps=-1, name="env_delay")
    with pytest.raises(ValueError, match=r"set one of env_delay\.steps, .*got env_delay\.steps, env_delay\.ms"):
        ActionDelay(steps=2, ms=10.0, name="env_delay")
    with pytest.raises(ValueError, match=r"delay\.sample_ms must be a list of milliseconds >= 0"):
        ActionDelay(sample_ms=(10.0, -1.0))
    with pytest.raises(ValueError, match=r"delay\.ms: .* does not say its control rate; give the delay in steps"):
        ActionDelay(ms=100.0).choices(None, "gym:my-env")


def test_the_reflection_mirrors_the_actions_in_flight():
    with envs.make("arm:push", num_envs=1, delay=ActionDelay(steps=2, aware=True)) as env:
        inner = env.env.reflection()
        mirror = env.reflection()
        assert mirror.state.shape == env.observation_spec["state"][0]
        torch.testing.assert_close(mirror.state[-8:], inner.action.repeat(2))


def test_in_flight_actions_at_deploy_match_what_the_env_appends():
    """Deploy's buffer (what the robot executed) gives the policy the same input as the simulator did."""
    acts = _actions(6, n=1, seed=2)
    with envs.make("arm:reach", num_envs=1, seed=0, delay=ActionDelay(steps=3, aware=True)) as env:
        flight = InFlightActions(env.metadata(), 4)
        obs = env.reset()
        flight.reset()
        for t in range(6):
            np.testing.assert_allclose(flight.observe(obs["state"][0, :S].numpy()), obs["state"][0].numpy())
            obs, *_ = env.step(acts[t])
            flight.sent(acts[t, 0].numpy())
