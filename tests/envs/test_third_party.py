"""Users' own environments: a package that registers an env on import (``gym:<module>:<id>``), Dict observations
mapped onto ``state``/``pixels``, a gymnasium env or factory wrapped in one line, and training on it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from robot_rl.envs import UnknownEnvError

from robot_rl import envs

PACKAGE = '''
import gymnasium as gym
import numpy as np


class SlideEnv(gym.Env):
    """A point that slides to the origin: Dict observation as LeRobot's envs give (agent_pos +
    environment_state), optionally a camera, and an action in its own units ([-2, 2])."""

    def __init__(self, camera=False):
        spaces = {"agent_pos": gym.spaces.Box(-5, 5, (2,), np.float64),
                  "environment_state": gym.spaces.Box(-5, 5, (1,), np.float64)}
        if camera:
            spaces["top"] = gym.spaces.Box(0, 255, (8, 8, 3), np.uint8)
        self.observation_space = gym.spaces.Dict(spaces)
        self.action_space = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)
        self.camera = camera

    def _obs(self):
        obs = {"agent_pos": self.pos.copy(), "environment_state": np.array([np.linalg.norm(self.pos)])}
        if self.camera:
            obs["top"] = np.full((8, 8, 3), int(min(255, 40 * np.linalg.norm(self.pos))), np.uint8)
        return obs

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos = self.np_random.uniform(-2, 2, 2)
        return self._obs(), {}

    def step(self, action):
        self.pos = np.clip(self.pos + 0.1 * np.asarray(action, np.float64), -5, 5)
        dist = float(np.linalg.norm(self.pos))
        return self._obs(), -dist, dist < 0.1, False, {"is_success": dist < 0.1}


class NestedGoalEnv(SlideEnv):
    """The same point, observed as goal-conditioned robot suites nest it ({"observation": {"robot": ..., "object":
    ...}, "desired_goal": ..., "achieved_goal": ...}), with a render() that returns two cameras at once."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode=None):
        super().__init__()
        box = lambda n: gym.spaces.Box(-5, 5, (n,), np.float64)  # noqa: E731
        self.observation_space = gym.spaces.Dict({
            "observation": gym.spaces.Dict({"robot": box(2), "object": gym.spaces.Dict({"dist": box(1)})}),
            "desired_goal": box(2), "achieved_goal": box(2)})
        self.render_mode = render_mode

    def _obs(self):
        return {"observation": {"robot": self.pos.copy(), "object": {"dist": np.array([np.linalg.norm(self.pos)])}},
                "desired_goal": np.zeros(2), "achieved_goal": self.pos.copy()}

    def render(self):
        return {"front": np.full((6, 10, 3), 10, np.uint8), "side": np.full((12, 8, 3), 200, np.uint8)}


gym.register("SlideEnv-v0", entry_point=SlideEnv, max_episode_steps=50)
gym.register("SlideCamEnv-v0", entry_point=SlideEnv, max_episode_steps=50, kwargs={"camera": True})
gym.register("NestedGoalEnv-v0", entry_point=NestedGoalEnv, max_episode_steps=50)
'''


@pytest.fixture
def lab_envs(tmp_path, monkeypatch) -> Path:
    """A third-party package, ``lab_envs``, that registers its envs when imported."""
    (tmp_path / "lab_envs").mkdir()
    (tmp_path / "lab_envs" / "__init__.py").write_text(textwrap.dedent(PACKAGE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for env_id in ("SlideEnv-v0", "SlideCamEnv-v0", "NestedGoalEnv-v0"):
        gym.registry.pop(env_id, None)
    sys.modules.pop("lab_envs", None)


def test_a_package_that_registers_on_import_is_gym_module_id(lab_envs) -> None:
    with envs.make("gym:lab_envs:SlideEnv-v0", num_envs=2, seed=0) as env:
        assert env.observation_spec == {"state": ((3,), torch.float32)}  # agent_pos (2) + environment_state (1)
        obs = env.reset()
        assert torch.allclose(obs["state"][:, 2], obs["state"][:, :2].norm(dim=1))  # documented order
        env.step(torch.ones(2, 2))  # [-1, 1] mapped onto the env's [-2, 2]
        assert env.max_episode_steps == 50


def test_image_entries_become_pixels(lab_envs) -> None:
    with envs.make("gym:lab_envs:SlideCamEnv-v0", num_envs=2, seed=0) as env:
        assert env.observation_spec == {"state": ((3,), torch.float32), "pixels": ((8, 8, 3), torch.uint8)}
        env.reset()
        obs, *_ = env.step(torch.zeros(2, 2))
        assert obs["pixels"].dtype == torch.uint8 and obs["pixels"].shape == (2, 8, 8, 3)


def test_nested_goal_observations_and_a_render_of_several_cameras(lab_envs) -> None:
    """Nested Dicts flatten depth first into state (a/b keys, sorted: achieved_goal, desired_goal, observation/object/
    dist, observation/robot); a render() of two cameras becomes one frame of the requested size, side by side."""
    with envs.make("gym:lab_envs:NestedGoalEnv-v0", num_envs=2, seed=0, render=True, render_size=(24, 40)) as env:
        assert env.observation_spec == {"state": ((7,), torch.float32)}
        obs = env.reset()["state"]
        torch.testing.assert_close(obs[:, 0:2], obs[:, 5:7])  # achieved_goal is the robot's position
        assert torch.all(obs[:, 2:4] == 0)  # desired_goal
        torch.testing.assert_close(obs[:, 4], obs[:, 5:7].norm(dim=1))  # observation/object/dist
        frame = env.render(0)
        assert frame.shape == (24, 40, 3) and frame.dtype == np.uint8
        assert np.all(frame[:, :20] == 10) and np.all(frame[:, 20:] == 200)  # front left, side right
    wrapped = envs.make_single("gym:lab_envs:NestedGoalEnv-v0")
    assert wrapped.get_wrapper_attr("state_keys") == ("achieved_goal", "desired_goal", "observation/object/dist",
                                                      "observation/robot")
    wrapped.close()


def test_unknown_ids_name_the_closest_only(lab_envs) -> None:
    with pytest.raises(UnknownEnvError, match=r"closest: gym:lab_envs:SlideEnv-v0") as e:
        envs.make("gym:lab_envs:SlideEnv-v1")
    assert "Pendulum" not in str(e.value)  # not the whole registry
    with pytest.raises(UnknownEnvError, match="cannot import 'no_such_pkg'"):
        envs.make("gym:no_such_pkg:Thing-v0")
    with pytest.raises(UnknownEnvError, match=r"no close match among \d+ ids; an env that a package registers"):
        envs.make("gym:Qwertyuiop-v9")


def test_from_gymnasium_wraps_an_instance_or_a_factory(lab_envs) -> None:
    import lab_envs as pkg

    with envs.from_gymnasium(pkg.SlideEnv(), seed=1) as one:
        assert one.num_envs == 1 and one.observation_spec["state"][0] == (3,)
    with envs.from_gymnasium(lambda: gym.make("SlideEnv-v0"), num_envs=3, seed=1) as three:
        obs = three.reset()
        assert obs["state"].shape == (3, 3)
        _, reward, *_ = three.step(torch.zeros(3, 2))
        assert torch.allclose(reward, -obs["state"][:, 2])
    with pytest.raises(ValueError, match="pass a factory"):
        envs.from_gymnasium(pkg.SlideEnv(), num_envs=2)
    assert np.isfinite(reward.numpy()).all()


def test_robot_rl_train_runs_on_a_third_party_env(lab_envs, tmp_path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": f"{lab_envs}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-m", "robot_rl", "train", "env.spec=gym:lab_envs:SlideEnv-v0", "train.steps=300",
         "train.learning_starts=100", "train.eval_every=300", "env.num_eval_envs=2", "train.video=false",
         "agent.network.hidden_dims=[32,32]", "quiet=true", "threads=1", f"run_dir={run}"],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert out.returncode == 0, out.stderr
    assert (run / "checkpoints" / "best.pt").is_file()
    rows = (run / "metrics.csv").read_text().splitlines()
    assert rows[1].startswith("300,") and rows[1].split(",")[4] != ""  # success_rate from info["is_success"]


def test_the_console_script_finds_a_module_in_the_working_folder(lab_envs) -> None:
    """`robot-rl ... env.spec=gym:lab_envs:...` run beside lab_envs/ imports it as `python -m` would; it needed
    PYTHONPATH=. before (issue 56, item 7): a console script puts its bin directory on sys.path, not the folder."""
    import shutil

    exe = shutil.which("robot-rl", path=str(Path(sys.executable).parent))
    assert exe, "the robot-rl console script is not installed"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    out = subprocess.run(
        [exe, "collect", "env.spec=gym:lab_envs:SlideEnv-v0", "policy=random", "episodes=1", "env.num_envs=1",
         "env.max_episode_steps=5", "out=demos"],
        capture_output=True, text=True, env={**env, "OMP_NUM_THREADS": "1"}, cwd=lab_envs, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    assert (lab_envs / "demos" / "meta" / "info.json").is_file()
