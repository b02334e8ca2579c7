"""The Python API: the examples of docs/python-api.md run as written; predict gives actions in the env's units."""

from __future__ import annotations

import re
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from robot_rl import api

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"


def _examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def test_the_documented_examples_run(tmp_path: Path) -> None:
    examples = _examples()
    assert len(examples) == 5
    for code in examples:
        exec(compile(code, str(DOC), "exec"), {"RUN_DIR": str(tmp_path / "run")})


@pytest.fixture(scope="module")
def pendulum_run(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("api") / "run"
    api.train("gym:Pendulum-v1", steps=300, run_dir=run, train__learning_starts=100, train__eval_every=300,
              env__num_eval_envs=1, train__video=False, quiet=True, threads=1)
    return run


def test_predict_is_in_the_envs_units(pendulum_run: Path) -> None:
    agent = api.Agent.load(pendulum_run)
    assert (agent.obs_dim, agent.action_dim, agent.spec) == (3, 1, "gym:Pendulum-v1")
    env = gym.make("Pendulum-v1")
    obs, _ = env.reset(seed=0)
    action = agent.predict(obs)
    assert action.shape == (1,) and env.action_space.contains(action.astype(np.float32))
    # [-1, 1] actions scaled by Pendulum's 2: the same actor through the raw [-1, 1] path gives half.
    raw = api.Agent.load(pendulum_run / "checkpoints" / "latest.pt")
    raw.action_space = None
    np.testing.assert_allclose(agent.predict(obs), 2.0 * raw.predict(obs), rtol=1e-6)
    batch = agent.predict(np.stack([obs, obs, obs]))
    assert batch.shape == (3, 1)
    with pytest.raises(ValueError, match="this policy takes 3"):
        agent.predict(np.zeros(5))


def test_a_policy_directory_with_the_envs_action_space(tmp_path: Path) -> None:
    from robot_rl.policies.bc_mlp import MLPPolicy
    from robot_rl.policies.io import save_policy

    save_policy(MLPPolicy(obs_dim=3, action_dim=1), tmp_path / "policy")
    agent = api.Agent.load(tmp_path, action_space=gym.spaces.Box(-2.0, 2.0, (1,)))  # the run dir finds policy/
    action = agent.predict(np.zeros(3, np.float32))
    assert action.shape == (1,) and -2.0 <= action[0] <= 2.0
