"""The Isaac Lab adapter (envs.isaaclab_backend) against a pure-torch fake of Isaac Lab's documented semantics.

Isaac Lab itself cannot run here (it needs Isaac Sim and an RTX GPU), so ``FakeIsaacLabEnv`` reproduces what
``ManagerBasedRLEnv.step`` documents and does: dict observations with a "policy" group, same-step autoreset
inside ``step`` (returned observations of reset envs are already the new episode's), separate ``terminated``
and ``time_outs`` outputs that live in persistent buffers updated in place, ``episode_length_buf``,
``max_episode_length``, an unbounded action space, and the opt-in ``cfg.compute_final_obs`` that stores the
pre-reset observation in ``extras["final_obs"]`` (left in the persistent ``extras`` dict afterwards).
"""

from __future__ import annotations

import importlib.util
import math
from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs import isaaclab_backend
from robot_rl.envs.core import EnvOptions
from robot_rl.envs.isaaclab_backend import IsaacLabEnv

from robot_rl import envs

N = 4
INF = float("inf")


class FakeIsaacLabEnv:
    """``num_envs`` copies of a counter task with Isaac Lab's step/reset contract.

    Policy observation per env: [episode id, step in episode, sum of the first action component, reset offset].
    The reward of a step is ``action[:, 0] + step in episode``. Env i terminates after ``terminate_after[i]``
    steps (0 = never) and times out at ``max_episode_length``.
    """

    def __init__(
        self,
        *,
        terminate_after: tuple[int, ...] = (2, 3, 0, 0),
        max_episode_length: int = 5,
        compute_final_obs: bool = True,
        action_low: Any = -INF,
        action_high: Any = INF,
        render_mode: str | None = None,
        rng_seed: int = 0,
    ) -> None:
        n = len(terminate_after)
        self.unwrapped = self
        self.num_envs = n
        self.device = "cpu"  # Isaac Lab reports its sim device as a string
        self.cfg = SimpleNamespace(compute_final_obs=compute_final_obs, is_finite_horizon=False)
        self.max_episode_length = max_episode_length
        self.render_mode = render_mode
        self.single_observation_space = gym.spaces.Dict(
            {
                "policy": gym.spaces.Box(-INF, INF, (4,)),
                "critic": gym.spaces.Box(-INF, INF, (2, 3)),
            }
        )
        self.single_action_space = gym.spaces.Box(np.float32(action_low), np.float32(action_high), (2,))
        self.episode_length_buf = torch.zeros(n, dtype=torch.long)
        self.reward_buf = torch.zeros(n)
        self.reset_terminated = torch.zeros(n, dtype=torch.bool)
        self.reset_time_outs = torch.zeros(n, dtype=torch.bool)
        self.extras: dict[str, Any] = {}
        self._terminate_after = torch.tensor(terminate_after)
        self._episode = torch.zeros(n)
        self._action_sum = torch.zeros(n)
        self._offset = torch.zeros(n)
        self._next_episode = 0
        # Isaac Lab seeds the process-wide RNGs; a private generator keeps the tests independent of each other.
        self._gen = torch.Generator().manual_seed(rng_seed)
        self.received: list[torch.Tensor] = []
        self.seeds: list[int | None] = []
        self.close_calls = 0

    def _observations(self) -> dict[str, torch.Tensor]:
        policy = torch.stack(
            [self._episode, self.episode_length_buf.float(), self._action_sum, self._offset], dim=1
        )
        return {"policy": policy, "critic": torch.ones(self.num_envs, 2, 3) * policy[:, :1, None]}

    def _reset_idx(self, mask: torch.Tensor) -> None:
        k = int(mask.sum())
        self._episode[mask] = torch.arange(self._next_episode, self._next_episode + k, dtype=torch.float32)
        self._next_episode += k
        self._action_sum[mask] = 0.0
        self._offset[mask] = torch.rand(k, generator=self._gen)
        self.episode_length_buf[mask] = 0
        self.extras["log"] = {"Episode_Termination/time_out": float(self.reset_time_outs.sum())}

    def reset(self, seed: int | None = None, env_ids: Any = None, options: Any = None):
        self.seeds.append(seed)
        if seed is not None:
            self._gen.manual_seed(seed)
        self._reset_idx(torch.ones(self.num_envs, dtype=torch.bool))
        return self._observations(), self.extras

    def step(self, action: torch.Tensor):
        action = action.to(self.device)
        self.received.append(action.clone())
        self._action_sum += action[:, 0]
        self.episode_length_buf += 1
        self.reset_terminated[:] = (self._terminate_after > 0) & (
            self.episode_length_buf >= self._terminate_after
        )
        self.reset_time_outs[:] = self.episode_length_buf >= self.max_episode_length
        self.reward_buf[:] = action[:, 0] + self.episode_length_buf
        done = self.reset_terminated | self.reset_time_outs
        if done.any():
            if self.cfg.compute_final_obs:
                self.extras["final_obs"] = self._observations()
            self._reset_idx(done)
        return self._observations(), self.reward_buf, self.reset_terminated, self.reset_time_outs, self.extras

    def render(self) -> np.ndarray | None:
        return np.full((6, 8, 4), 200, dtype=np.uint8) if self.render_mode == "rgb_array" else None

    def close(self) -> None:
        self.close_calls += 1


def adapter(**kwargs: Any) -> tuple[IsaacLabEnv, FakeIsaacLabEnv]:
    fake_kwargs = {k: kwargs.pop(k) for k in list(kwargs) if k in FakeIsaacLabEnv.__init__.__kwdefaults__}
    fake = FakeIsaacLabEnv(**fake_kwargs)
    return IsaacLabEnv(fake, spec="isaaclab:Fake-v0", **kwargs), fake


def actions(steps: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return (torch.rand(steps, N, 2, generator=gen) * 2 - 1) * scale


def test_shapes_dtypes_device_and_spaces() -> None:
    env, _ = adapter()
    assert env.num_envs == N and env.device == torch.device("cpu") and env.max_episode_steps == 5
    assert env.observation_spec == {"state": ((4,), torch.float32)} and env.action_dim == 2
    assert env.single_observation_space == gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    assert env.single_action_space == gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    with pytest.raises(RuntimeError, match="reset"):
        env.step(torch.zeros(N, 2))
    obs = env.reset()
    assert set(obs) == {"state"} and obs["state"].shape == (N, 4) and obs["state"].dtype == torch.float32
    obs, reward, terminated, truncated, info = env.step(torch.zeros(N, 2, dtype=torch.float64))
    assert obs["state"].shape == (N, 4) and obs["state"].dtype == torch.float32
    assert reward.shape == (N,) and reward.dtype == torch.float32
    assert terminated.dtype == torch.bool and truncated.dtype == torch.bool and terminated.shape == (N,)
    assert info["final_obs"]["state"].shape == (N, 4)
    for key in ("episode_return", "episode_length"):
        assert info[key].shape == (N,) and info[key].dtype == torch.float32 and not info[key].any()
    assert "log" in info  # Isaac Lab's extras["log"], passed through
    final = info["final_obs"]["state"]
    tensors = [obs["state"], reward, terminated, truncated, final, info["episode_return"]]
    assert all(t.device == env.device for t in tensors)


def test_non_finite_action_raises_before_anything_is_sent() -> None:
    env, fake = adapter()
    env.reset()
    for bad in (float("nan"), INF, -INF):
        action = torch.zeros(N, 2)
        action[2, 1] = bad
        with pytest.raises(ValueError, match=r"NaN or inf for sub-env\(s\) \[2\]"):
            env.step(action)
    with pytest.raises(ValueError, match="shape"):
        env.step(torch.zeros(N, 3))
    with pytest.raises(TypeError, match="floating point"):
        env.step(torch.zeros(N, 2, dtype=torch.int64))
    assert fake.received == [] and not fake.episode_length_buf.any()


def test_actions_are_clipped_and_passed_through_an_unbounded_space() -> None:
    env, fake = adapter()
    env.reset()
    action = torch.tensor([[0.5, -2.0], [3.0, 0.25], [-1e300, 1.0], [-0.75, 7.0]], dtype=torch.float64)
    _, reward, *_ = env.step(action)
    expected = action.clamp(-1, 1).float()
    assert fake.received[0].dtype == torch.float32 and torch.equal(fake.received[0], expected)
    assert torch.equal(reward, expected[:, 0] + 1.0)


def test_bounded_action_space_is_mapped_affinely_and_action_scale_applies_to_unbounded() -> None:
    env, fake = adapter(action_low=[0.0, -INF], action_high=[2.0, INF], action_scale=0.5)
    env.reset()
    action = torch.tensor([[-1.0, -1.0], [0.0, 0.5], [1.0, 1.0], [0.5, 4.0]])
    env.step(action)
    clipped = action.clamp(-1, 1)
    torch.testing.assert_close(fake.received[0][:, 0], clipped[:, 0] + 1.0)  # [0, 2]: 1 + a
    torch.testing.assert_close(fake.received[0][:, 1], clipped[:, 1] * 0.5)  # unbounded: a * action_scale
    with pytest.raises(ValueError, match="action_scale"):
        adapter(action_scale=0.0)


def test_terminated_and_truncated_map_to_isaac_labs_outputs() -> None:
    env, _ = adapter()
    env.reset()
    # env 0 terminates every 2 steps, env 1 every 3; envs 2 and 3 time out at max_episode_length = 5.
    for t in range(1, 11):
        _, _, terminated, truncated, info = env.step(torch.zeros(N, 2))
        assert terminated.tolist() == [t % 2 == 0, t % 3 == 0, False, False]
        assert truncated.tolist() == [False, False, t % 5 == 0, t % 5 == 0]
        timed_out = 5.0 if t % 5 == 0 else 0.0
        expected_length = [2.0 if t % 2 == 0 else 0.0, 3.0 if t % 3 == 0 else 0.0, timed_out, timed_out]
        assert info["episode_length"].tolist() == expected_length


def test_outputs_do_not_alias_isaac_labs_persistent_buffers() -> None:
    env, _ = adapter()
    obs0 = env.reset()["state"].clone()
    obs, reward, terminated, truncated, _ = env.step(torch.ones(N, 2))
    kept = [t.clone() for t in (obs["state"], reward, terminated, truncated)]
    env.step(-torch.ones(N, 2))  # overwrites the fake's reward/done buffers in place
    assert all(
        torch.equal(a, b) for a, b in zip(kept, (obs["state"], reward, terminated, truncated), strict=True)
    )
    assert not torch.equal(obs0, obs["state"])


def test_final_obs_from_compute_final_obs() -> None:
    env, _ = adapter(compute_final_obs=True)
    assert env.final_obs_source == "env" and env.final_obs_exact
    first_offset = float(env.reset()["state"][0, 3])
    a = actions(7)
    env.step(a[0])
    obs, _, terminated, _, info = env.step(a[1])
    final = info["final_obs"]["state"]
    assert terminated.tolist() == [True, False, False, False]
    expected_last = [0.0, 2.0, float(a[0, 0, 0] + a[1, 0, 0]), first_offset]
    torch.testing.assert_close(final[0], torch.tensor(expected_last))  # the true last observation
    assert obs["state"][0, 0] == N and obs["state"][0, 1] == 0  # already the next episode's first one
    assert torch.equal(final[1:], obs["state"][1:])  # unfinished rows equal the returned obs
    for t in range(2, 7):
        obs, _, terminated, truncated, info = env.step(a[t])
    # Step 7 ends no episode while extras["final_obs"] still holds step 6's: a stale entry must not leak.
    assert not (terminated | truncated).any()
    assert torch.equal(info["final_obs"]["state"], obs["state"])


def test_final_obs_fallback_without_compute_final_obs() -> None:
    env, _ = adapter(compute_final_obs=False)
    assert env.final_obs_source == "reset_obs" and not env.final_obs_exact
    env.reset()
    seen_done = False
    for a in actions(6):
        obs, _, terminated, truncated, info = env.step(a)
        seen_done |= bool((terminated | truncated).any())
        assert torch.equal(info["final_obs"]["state"], obs["state"])  # Isaac Lab's documented limitation
    assert seen_done


def test_episode_statistics_match_a_hand_computation() -> None:
    env, _ = adapter()
    env.reset()
    a = actions(12, seed=3, scale=1.5)
    running, length = [0.0] * N, [0] * N
    finished = 0
    for t in range(12):
        _, reward, terminated, truncated, info = env.step(a[t])
        step_in_episode = torch.tensor([length[i] + 1 for i in range(N)], dtype=torch.float32)
        torch.testing.assert_close(reward, a[t, :, 0].clamp(-1, 1) + step_in_episode)
        for i in range(N):
            running[i] += float(reward[i])
            length[i] += 1
            if terminated[i] or truncated[i]:
                assert info["episode_length"][i] == length[i]
                assert math.isclose(float(info["episode_return"][i]), running[i], rel_tol=1e-6)
                running[i], length[i] = 0.0, 0
                finished += 1
            else:
                assert info["episode_length"][i] == 0 and info["episode_return"][i] == 0
    assert finished == 6 + 4 + 2 + 2


def test_seed_goes_to_isaac_labs_reset() -> None:
    env, fake = adapter(seed=7)
    first = env.reset()["state"]
    env.reset()
    env.reset(seed=3)
    assert fake.seeds == [7, None, 3]
    other, _ = adapter(seed=7, rng_seed=99)  # different unseeded state, same seed
    assert torch.equal(other.reset()["state"], first)
    unseeded, _ = adapter(rng_seed=99)
    assert not torch.equal(unseeded.reset()["state"], first)


def test_action_repeat_matches_repeated_steps_and_keeps_the_finished_episode() -> None:
    kwargs = {"terminate_after": (3, 0, 0, 0), "max_episode_length": 9}
    once, ref_fake = adapter(**kwargs)
    twice, fake = adapter(action_repeat=2, **kwargs)
    assert once.max_episode_steps == 9 and twice.max_episode_steps == 5  # ceil(9 / 2) agent steps
    once.reset(), twice.reset()
    a = actions(3, seed=5)
    ref = [once.step(a[k // 2]) for k in range(6)]  # sub-steps 1..6 with each action twice
    out = [twice.step(a[k]) for k in range(3)]
    assert torch.equal(torch.cat(fake.received), torch.cat(ref_fake.received))
    for k, (obs, _, terminated, truncated, _) in enumerate(out):
        assert torch.equal(obs["state"], ref[2 * k + 1][0]["state"])
        assert not truncated.any()
        assert torch.equal(terminated, ref[2 * k][2] | ref[2 * k + 1][2])
    # Agent step 1: no episode ends; rewards of both sub-steps are summed.
    torch.testing.assert_close(out[0][1], ref[0][1] + ref[1][1])
    # Agent step 2: env 0 terminates on sub-step 3, the first of the repeat.
    _, reward, terminated, _, info = out[1]
    assert terminated.tolist() == [True, False, False, False]
    torch.testing.assert_close(info["final_obs"]["state"][0], ref[2][4]["final_obs"]["state"][0])
    torch.testing.assert_close(reward[0], ref[2][1][0])  # sub-step 4 belongs to the next episode: dropped
    torch.testing.assert_close(reward[1:], ref[2][1][1:] + ref[3][1][1:])
    assert info["episode_length"].tolist() == [2.0, 0.0, 0.0, 0.0]
    torch.testing.assert_close(info["episode_return"][0], ref[0][1][0] + ref[1][1][0] + ref[2][1][0])
    assert torch.equal(info["final_obs"]["state"][1:], out[1][0]["state"][1:])
    # Agent step 3: the next episode of env 0 (begun on sub-step 4) ends on sub-step 6.
    _, reward, terminated, _, info = out[2]
    assert terminated[0] and info["episode_length"][0] == 1
    torch.testing.assert_close(info["episode_return"][0], ref[4][1][0] + ref[5][1][0])
    torch.testing.assert_close(info["final_obs"]["state"][0], ref[5][4]["final_obs"]["state"][0])


def test_render_close_and_context_manager() -> None:
    env, _ = adapter(render=True, render_mode="rgb_array")
    env.reset()
    frame = env.render()
    assert frame.shape == (6, 8, 3) and frame.dtype == np.uint8 and frame.flags.c_contiguous
    with pytest.raises(ValueError, match="index 0"):
        env.render(1)
    with pytest.raises(IndexError):
        env.render(N)
    no_frames, _ = adapter(render=True)
    with pytest.raises(RuntimeError, match="rgb_array"):
        no_frames.render()
    plain, _ = adapter()
    with pytest.raises(RuntimeError, match="render=True"):
        plain.render()

    with adapter()[0] as env:
        fake = env.unwrapped
        env.reset()
    assert env.closed and fake.close_calls == 1
    env.close()  # idempotent
    assert fake.close_calls == 1
    with pytest.raises(RuntimeError, match="closed"):
        env.step(torch.zeros(N, 2))


def test_obs_group_option() -> None:
    env, _ = adapter(obs_group="critic")
    assert env.observation_spec == {"state": ((6,), torch.float32)}
    assert env.reset()["state"].shape == (N, 6)
    with pytest.raises(
        ValueError, match=r"no observation group 'pixels'; its groups are \['critic', 'policy'\]"
    ):
        adapter(obs_group="pixels")


def test_unconcatenated_group_is_flattened_in_term_order() -> None:
    class TermsFake(FakeIsaacLabEnv):
        def __init__(self) -> None:
            super().__init__()
            terms = {"pos": gym.spaces.Box(-INF, INF, (1,)), "vel": gym.spaces.Box(-INF, INF, (2,))}
            self.single_observation_space = gym.spaces.Dict({"policy": gym.spaces.Dict(terms)})

        def _observations(self) -> dict[str, Any]:
            step = self.episode_length_buf.float()[:, None]
            return {"policy": {"pos": step, "vel": torch.cat([step + 1, step + 2], dim=1)}}

    env = IsaacLabEnv(TermsFake())
    assert env.observation_spec == {"state": ((3,), torch.float32)}
    env.reset()
    obs, *_ = env.step(torch.zeros(N, 2))
    assert obs["state"][2].tolist() == [1.0, 2.0, 3.0]


@pytest.fixture
def fake_factory(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """make_batched with create_isaaclab_env replaced by the fake; records the factory's arguments."""
    calls: list[dict[str, Any]] = []

    def create(task_id: str, num_envs: int, device: Any, seed: Any, **kwargs: Any) -> FakeIsaacLabEnv:
        calls.append({"task_id": task_id, "num_envs": num_envs, "device": device, "seed": seed, **kwargs})
        return FakeIsaacLabEnv(terminate_after=(0,) * num_envs, render_mode="rgb_array")

    monkeypatch.setattr(isaaclab_backend, "create_isaaclab_env", create)
    return calls


def test_make_batched_wiring_and_one_env_per_process(fake_factory: list[dict[str, Any]]) -> None:
    options = EnvOptions(action_repeat=2, render=True, render_size=(36, 48))
    env = isaaclab_backend.make_batched("isaaclab:Fake-v0", "Fake-v0", 3, "cpu", 11, options)
    assert fake_factory == [
        {
            "task_id": "Fake-v0",
            "num_envs": 3,
            "device": "cpu",
            "seed": 11,
            "render": True,
            "render_size": (36, 48),
        }
    ]
    assert env.spec == "isaaclab:Fake-v0" and env.num_envs == 3 and env.max_episode_steps == 3
    env.reset()
    assert env.unwrapped.seeds == [11] and env.render().shape == (6, 8, 3)
    with pytest.raises(RuntimeError, match="one simulation per process"):
        isaaclab_backend.make_batched("isaaclab:Fake-v0", "Fake-v0", 3, "cpu", 11, EnvOptions())
    env.close()
    isaaclab_backend.make_batched("isaaclab:Fake-v0", "Fake-v0", 3, "cuda", None, EnvOptions()).close()
    assert fake_factory[-1]["device"] == "cuda:0"  # Isaac Lab's device names carry the index
    for bad, match in (
        (EnvOptions(max_episode_steps=10), "episode_length_s"),
        (EnvOptions(camera_id=0), "viewer"),
    ):
        with pytest.raises(ValueError, match=match):
            isaaclab_backend.make_batched("isaaclab:Fake-v0", "Fake-v0", 3, "cpu", None, bad)
    assert len(fake_factory) == 2  # rejected options never reach Isaac Sim


def test_make_env_says_batched_only() -> None:
    with pytest.raises(
        ValueError, match=r"batched only.*envs\.make\('isaaclab:Isaac-Cartpole-v0', num_envs=N\)"
    ):
        isaaclab_backend.make_env("Isaac-Cartpole-v0", EnvOptions())


isaaclab_missing = pytest.mark.skipif(
    importlib.util.find_spec("isaaclab") is not None, reason="Isaac Lab is installed here"
)


@isaaclab_missing
def test_missing_isaaclab_gives_the_install_command() -> None:
    with pytest.raises(
        ImportError, match=r"isaaclab\[isaacsim,all\].*--extra-index-url https://pypi\.nvidia\.com"
    ):
        isaaclab_backend.make_batched(
            "isaaclab:Isaac-Cartpole-v0", "Isaac-Cartpole-v0", 2, "cpu", 0, EnvOptions()
        )


@isaaclab_missing
def test_envs_make_routes_isaaclab_specs() -> None:
    """Through the public API; needs the ``"isaaclab:": ".isaaclab_backend"`` entry in ``robot_rl.envs._BACKENDS``."""
    with pytest.raises(ImportError, match=r"pip install \"isaaclab\[isaacsim,all\]"):
        envs.make("isaaclab:Isaac-Cartpole-v0")
    with pytest.raises(ValueError, match="batched only"):
        envs.make_single("isaaclab:Isaac-Cartpole-v0")
