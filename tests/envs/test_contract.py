"""Contract tests for envs.make / envs.make_single over gymnasium and dm_control backends.

Envs are kept tiny (2-3 sub-envs, short horizons) so the module runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import warnings

import dm_env
import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env

from robot_rl import envs

SPECS = [
    "gym:Pendulum-v1",
    "gym:Hopper-v5",
    "dmc:cartpole-swingup",
    "mujoco:HalfCheetah-v5",
    "mujoco:Hopper-v5",
    "arm:reach",
    "arm:push-sparse",
    # envs.sim: tasks defined once in torch, on CPU MuJoCo, MJX and MuJoCo Warp (both run on the CPU here)
    "mujoco:cartpole-swingup",
    "mujoco:push-sparse",
    "mjx:cartpole-swingup",
    "warp:cartpole-swingup",
]
# Specs without a single-env gymnasium form (envs.make_single raises and says what to use instead).
BATCHED_ONLY = {"mujoco:cartpole-swingup", "mujoco:push-sparse", "mjx:cartpole-swingup", "warp:cartpole-swingup"}
RENDER_SPECS = [
    "gym:Hopper-v5",
    "dmc:cartpole-swingup",
    "mujoco:Hopper-v5",
    "arm:reach",
    "mujoco:push-sparse",
    "mjx:cartpole-swingup",
    "warp:cartpole-swingup",
]
DEFAULT_LIMITS = {
    "gym:Pendulum-v1": 200,
    "gym:Hopper-v5": 1000,
    "dmc:cartpole-swingup": 1000,
    "mujoco:HalfCheetah-v5": 1000,
    "mujoco:Hopper-v5": 1000,
    "arm:reach": 50,
    "arm:push-sparse": 100,
    "mujoco:cartpole-swingup": 1000,
    "mujoco:push-sparse": 100,
    "mjx:cartpole-swingup": 1000,
    "warp:cartpole-swingup": 1000,
}
SUCCESS_SPECS = {"arm:reach", "arm:push-sparse", "mujoco:push-sparse"}  # tasks that report info["success"]
N = 3




def random_actions(steps: int, num_envs: int, dim: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(steps, num_envs, dim, generator=gen) * 2 - 1


@pytest.mark.parametrize("spec", SPECS)
def test_shapes_dtypes_device(make, spec: str) -> None:
    env = make(spec, num_envs=N, seed=0)
    assert env.num_envs == N and env.spec == spec and env.device == torch.device("cpu")
    assert set(env.observation_spec) == {"state"}
    (dim,), dtype = env.observation_spec["state"]
    assert dtype == torch.float32
    assert env.single_observation_space.shape == (dim,)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (env.action_dim,), np.float32)
    assert env.max_episode_steps == DEFAULT_LIMITS[spec]

    obs = env.reset()
    assert set(obs) == {"state"}
    assert obs["state"].shape == (N, dim) and obs["state"].dtype == torch.float32
    assert obs["state"].device == env.device

    obs, reward, terminated, truncated, info = env.step(torch.zeros(N, env.action_dim))
    assert obs["state"].shape == (N, dim) and obs["state"].dtype == torch.float32
    assert reward.shape == (N,) and reward.dtype == torch.float32
    assert terminated.shape == (N,) and terminated.dtype == torch.bool
    assert truncated.shape == (N,) and truncated.dtype == torch.bool
    assert info["final_obs"]["state"].shape == (N, dim)
    for key in ("episode_return", "episode_length"):
        assert info[key].shape == (N,) and info[key].dtype == torch.float32
        assert torch.all(info[key] == 0)
    if spec in SUCCESS_SPECS:
        assert info["success"].shape == (N,) and info["success"].dtype == torch.bool
    else:
        assert "success" not in info
    assert all(t.device == env.device for t in (reward, terminated, truncated))


def test_dmc_domain_with_underscore(make) -> None:
    env = make("dmc:ball_in_cup-catch", num_envs=1, seed=0)
    assert env.observation_spec == {"state": ((8,), torch.float32)}
    assert env.action_dim == 2
    env.reset()
    env.step(torch.zeros(1, 2))


@pytest.mark.parametrize("spec", SPECS)
def test_out_of_range_actions_are_clipped(make, spec: str) -> None:
    a, b = make(spec, num_envs=2, seed=0), make(spec, num_envs=2, seed=0)
    a.reset(), b.reset()
    signs = torch.sign(random_actions(3, 2, a.action_dim))
    for action in signs:
        obs_a, rew_a, *_ = a.step(action)
        obs_b, rew_b, *_ = b.step(action * 7.5)
        assert torch.equal(obs_a["state"], obs_b["state"]) and torch.equal(rew_a, rew_b)


@pytest.mark.parametrize("spec", SPECS)
def test_non_finite_action_raises_before_simulation(make, spec: str) -> None:
    env, ref = make(spec, num_envs=2, seed=0), make(spec, num_envs=2, seed=0)
    env.reset(), ref.reset()
    for bad in (float("nan"), float("inf"), -float("inf")):
        action = torch.zeros(2, env.action_dim)
        action[1, 0] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            env.step(action)
    # Nothing reached the simulator: the env still tracks an untouched reference.
    for action in random_actions(3, 2, env.action_dim):
        obs, *_ = env.step(action)
        ref_obs, *_ = ref.step(action)
        assert torch.equal(obs["state"], ref_obs["state"])

    if spec in BATCHED_ONLY:
        return
    single = envs.make_single(spec, seed=0)
    with pytest.raises(ValueError, match="NaN or inf"):
        single.step(np.full(single.action_space.shape, np.nan, dtype=np.float32))
    single.close()


@pytest.mark.parametrize("spec", SPECS)
def test_autoreset_with_final_obs(make, spec: str) -> None:
    env = make(spec, num_envs=N, seed=0, max_episode_steps=5)
    ref = make(spec, num_envs=N, seed=0)  # same dynamics, no early time limit
    assert env.max_episode_steps == 5
    env.reset(), ref.reset()
    actions = random_actions(6, N, env.action_dim, seed=1)
    rewards = []
    for t in range(5):
        obs, reward, terminated, truncated, info = env.step(actions[t])
        ref_obs, ref_reward, *_ = ref.step(actions[t])
        rewards.append(reward)
        assert torch.equal(reward, ref_reward)
        assert not terminated.any()
        if t < 4:
            assert not truncated.any()
            assert torch.equal(info["final_obs"]["state"], obs["state"])
            assert torch.all(info["episode_length"] == 0) and torch.all(info["episode_return"] == 0)
            assert torch.equal(obs["state"], ref_obs["state"])
    assert truncated.all()
    final = info["final_obs"]["state"]
    assert torch.equal(final, ref_obs["state"])  # the true last observation
    assert not torch.equal(final, obs["state"])  # obs is already the first of the next episode
    assert torch.all(info["episode_length"] == 5)
    torch.testing.assert_close(info["episode_return"], torch.stack(rewards).sum(0))

    obs, reward, terminated, truncated, info = env.step(actions[5])
    assert not (terminated | truncated).any()
    assert torch.all(info["episode_length"] == 0)


def test_terminated_kept_apart_from_truncated(make) -> None:
    env = make("gym:Hopper-v5", num_envs=4, seed=0)
    env.reset()
    seen_termination = False
    for action in random_actions(300, 4, env.action_dim):
        _, _, terminated, truncated, info = env.step(action)
        assert not truncated.any()  # far below the 1000-step limit
        if terminated.any():
            seen_termination = True
            assert torch.all(info["episode_length"][terminated] < 1000)
            assert torch.all(info["episode_length"][~terminated] == 0)
    assert seen_termination, "random actions should make the hopper fall"


def test_dmc_last_step_maps_to_terminated_or_truncated() -> None:
    from robot_rl.envs.dmc_backend import DmcEnv

    env = DmcEnv("cartpole", "swingup")
    obs0, _ = env.reset(seed=0)
    dm_obs = env._env.reset().observation
    env._env.step = lambda action: dm_env.termination(reward=1.0, observation=dm_obs)
    _, reward, terminated, truncated, _ = env.step(np.zeros(1))
    assert (reward, terminated, truncated) == (1.0, True, False)
    env._env.step = lambda action: dm_env.truncation(reward=0.5, observation=dm_obs, discount=1.0)
    _, reward, terminated, truncated, _ = env.step(np.zeros(1))
    assert (reward, terminated, truncated) == (0.5, False, True)
    env.close()


@pytest.mark.parametrize("spec", SPECS)
def test_seeding_is_reproducible(make, spec: str) -> None:
    a, b = make(spec, num_envs=2, max_episode_steps=10), make(spec, num_envs=2, max_episode_steps=10)
    obs_a, obs_b = a.reset(seed=7), b.reset(seed=7)
    assert torch.equal(obs_a["state"], obs_b["state"])
    resets = 0
    for action in random_actions(30, 2, a.action_dim):
        obs_a, rew_a, term_a, trunc_a, info_a = a.step(action)
        obs_b, rew_b, term_b, trunc_b, info_b = b.step(action)
        assert torch.equal(obs_a["state"], obs_b["state"]) and torch.equal(rew_a, rew_b)
        assert torch.equal(term_a, term_b) and torch.equal(trunc_a, trunc_b)
        assert torch.equal(info_a["final_obs"]["state"], info_b["final_obs"]["state"])
        resets += int((term_a | trunc_a).sum())
    assert resets >= 2  # the comparison covered autoresets

    first = a.reset(seed=7)["state"]
    other = b.reset(seed=8)["state"]
    assert not torch.equal(first[0], other[0])  # different seeds differ
    assert torch.equal(first[1], other[0])  # sub-env i is seeded with seed + i
    # reset() without a seed continues each stream, identically across instances.
    b.reset(seed=7)
    again_a, again_b = a.reset()["state"], b.reset()["state"]
    assert torch.equal(again_a, again_b) and not torch.equal(again_a, first)
    # The seed given to make applies to the first reset.
    c = make(spec, num_envs=2, seed=7)
    assert torch.equal(c.reset()["state"], first)


@pytest.mark.parametrize("spec", SPECS)
def test_action_repeat_matches_repeated_steps(make, spec: str) -> None:
    once, twice = make(spec, num_envs=2, seed=3), make(spec, num_envs=2, seed=3, action_repeat=2)
    once.reset(), twice.reset()
    for action in random_actions(3, 2, once.action_dim):
        _, r1, *_ = once.step(action)
        obs1, r2, *_ = once.step(action)
        obs2, r, *_ = twice.step(action)
        assert torch.equal(obs1["state"], obs2["state"])
        torch.testing.assert_close(r, r1 + r2)


@pytest.mark.parametrize("spec", ["gym:Pendulum-v1", "dmc:cartpole-swingup"])
def test_action_repeat_halves_episode_length(make, spec: str) -> None:
    env = make(spec, num_envs=1, seed=0, action_repeat=2)
    assert env.max_episode_steps == DEFAULT_LIMITS[spec] // 2
    env.reset()
    zeros = torch.zeros(1, env.action_dim)
    for t in range(1, env.max_episode_steps + 1):
        _, _, terminated, truncated, info = env.step(zeros)
        assert not terminated.any()
        assert bool(truncated[0]) == (t == env.max_episode_steps)
    assert info["episode_length"][0] == DEFAULT_LIMITS[spec] // 2

    explicit = make(spec, num_envs=1, seed=0, action_repeat=2, max_episode_steps=4)
    explicit.reset()
    for _ in range(4):
        _, _, _, truncated, info = explicit.step(zeros)
    assert truncated[0] and info["episode_length"][0] == 4  # limits count agent steps


@pytest.mark.parametrize("spec", RENDER_SPECS)
def test_render(make, spec: str) -> None:
    env = make(spec, num_envs=2, seed=0, render=True, render_size=(36, 48))
    env.reset()
    env.step(torch.zeros(2, env.action_dim))
    for index in (0, 1):
        frame = env.render(index)
        assert frame.shape == (36, 48, 3) and frame.dtype == np.uint8
        assert frame.any()
    with pytest.raises(IndexError):
        env.render(2)

    plain = make(spec, num_envs=1, seed=0)
    plain.reset()
    with pytest.raises(RuntimeError, match="render=True"):
        plain.render()


@pytest.mark.parametrize("spec", SPECS)
def test_make_single_passes_env_checker(spec: str) -> None:
    if spec in BATCHED_ONLY:
        with pytest.raises(ValueError, match=r"num_envs=1"):
            envs.make_single(spec, seed=0)
        return
    env = envs.make_single(spec, seed=0)
    assert env.action_space == gym.spaces.Box(-1.0, 1.0, env.action_space.shape, np.float32)
    assert env.observation_space.dtype == np.float32
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # infinite-bounds / wrapped-env advisories
        check_env(env, skip_render_check=True)
    env.close()


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("Hopper-v5", "'gym:', 'dmc:', 'mujoco:'"),
        ("jaxsim:Hopper-v5", "'gym:', 'dmc:', 'mujoco:'"),
        ("mjx:hoper-v5", "mjx:Hopper-v5"),
        ("warp:cartpole-swingupp", "warp:cartpole-swingup"),
        ("mujoco:cartpole-swingupp", "mujoco:cartpole-swingup"),
        ("gym:", "'gym:', 'dmc:', 'mujoco:'"),
        ("gym:Hoper-v5", "gym:Hopper-v5"),
        ("gym:halfcheetah-v5", "gym:HalfCheetah-v5"),
        ("dmc:cartpole-swingupp", "dmc:cartpole-swingup"),
        ("dmc:walkr-walk", "dmc:walker-walk"),
        ("dmc:ball-in-cup-catch", "dmc:ball_in_cup-catch"),
        ("mujoco:Hoper-v5", "mujoco:Hopper-v5"),
        ("mujoco:Ant-v5", "gym:Ant-v5"),
    ],
)
def test_unknown_spec_names_close_matches(spec: str, expected: str) -> None:
    for factory in (envs.make, envs.make_single):
        with pytest.raises(envs.UnknownEnvError) as err:
            factory(spec)
        message = str(err.value)
        assert isinstance(err.value, ValueError)
        assert "\n" not in message and repr(spec) in message and expected in message


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="frame_skip"):
        envs.make("gym:Pendulum-v1", frame_skip=2)
    with pytest.raises(TypeError, match="frame_skip"):
        envs.make_single("dmc:cartpole-swingup", frame_skip=2)
    with pytest.raises(ValueError, match="num_envs"):
        envs.make("gym:Pendulum-v1", num_envs=0)
    with pytest.raises(ValueError, match="action_repeat"):
        envs.make("gym:Pendulum-v1", action_repeat=0)
    with pytest.raises(ValueError, match="Box"):
        envs.make("gym:CartPole-v1")


def test_context_manager_closes() -> None:
    with envs.make("gym:Pendulum-v1", num_envs=2, seed=0) as env:
        env.reset()
        with pytest.raises(ValueError, match="shape"):
            env.step(torch.zeros(3, 1))
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()
    env.close()  # idempotent
