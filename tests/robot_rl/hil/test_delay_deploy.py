"""A policy trained under `env_delay`: its config keys, its export (the actions in flight are part of its input,
the delay part of its metadata) and deploy on the served simulated arm (the in-flight buffer, the measured delay)."""

from __future__ import annotations

from dataclasses import asdict

import numpy as np
import pytest
import torch
from robot_rl.envs.arm import STATE_DIM
from test_robot_commands import TOKEN, served_robot

from robot_rl import checkpoint
from robot_rl.cli import main


@pytest.mark.parametrize("args, expected", [
    (["env_delay.steps=-2"], "env_delay.steps must be an int >= 0, got -2"),
    (["env_delay.steps=2", "env_delay.sample_steps=[1,2]"],
     "set one of env_delay.steps, env_delay.ms, env_delay.sample_steps, env_delay.sample_ms; got env_delay.steps, "
     "env_delay.sample_steps"),
    (["env.spec=gym:my_envs_nowhere:Thing-v0", "env_delay.ms=-5"], "env_delay.ms must be >= 0"),
])
def test_train_refuses_bad_delay_keys_in_one_line(args, expected, capsys):
    assert main(["train", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and expected in err, err


def _delay_checkpoint(tmp_path, aware: bool = True):
    """A `robot-rl train` checkpoint of an arm:reach agent trained with env_delay.steps=3 (weights untrained)."""
    from robot_rl.agents.sac import SAC
    from robot_rl.config import compose_train_config

    cfg = compose_train_config(["env.spec=arm:reach", "env_delay.steps=3", f"env_delay.aware={str(aware).lower()}",
                                "agent.network.critic_width=32", "agent.network.actor_width=32"])
    obs_dim = STATE_DIM + (3 * 4 if aware else 0)
    agent = SAC(obs_dim, 4, cfg.agent)
    path = tmp_path / "run" / "checkpoints" / "latest.pt"
    path.parent.mkdir(parents=True)
    checkpoint.atomic_save({"format": 1, "agent": agent.state_dict(), "config": asdict(cfg)}, path)
    return path.parent.parent, agent


def test_a_delay_aware_run_exports_with_its_delay_and_reads_the_actions_in_flight(tmp_path):
    from robot_rl.api import Agent
    from robot_rl.export import export

    run, agent = _delay_checkpoint(tmp_path)
    out = export(run, tmp_path / "exported")
    loaded = Agent.load(out)
    assert loaded.obs_dim == STATE_DIM + 12
    assert loaded.delay["choices"] == [3] and loaded.delay["aware"] and loaded.delay["control_dt"] == 0.05
    obs = torch.randn(4, STATE_DIM + 12)
    with torch.no_grad():
        expected = agent.act({"state": obs}, deterministic=True).numpy()
    np.testing.assert_allclose(Agent.load(out, action_space=None).predict(obs.numpy()), expected, atol=1e-6)
    with pytest.raises(ValueError, match=r"trained delay-aware \(3 steps \(150 ms\)\) and reads the actions in flight"):
        loaded.predict(np.zeros(STATE_DIM, np.float32))  # the robot's state alone


def test_deploy_feeds_a_delay_aware_policy_its_actions_in_flight_and_warns_of_the_measured_delay(
        tmp_path, capsys, monkeypatch):
    """The policy reads state + the 3 actions the robot executed last (the run would stop with 'maps 41 states'
    otherwise); the bridge applies each action at the next tick (delay 0), which is not what the policy was trained
    under: one warning early and the summary say so, with the train keys to use."""
    run, _ = _delay_checkpoint(tmp_path)
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    with served_robot() as address:
        capsys.readouterr()
        code = main(["deploy", f"robot={address}", "step_timeout_s=5", f"checkpoint={run}", "episodes=1"])
    out = capsys.readouterr()
    assert code == 0, out.err
    text = out.out + out.err
    assert "done: 1 episodes" in text
    assert "observation-to-action delay on the bridge: median 0 steps (0 ms)" in text
    assert "trained with 3 steps (150 ms) (differs: see the warning)" in text
    assert text.count("warning: the bridge's observation-to-action delay is median 0 steps") == 1
    assert "env_delay.steps=0 env_delay.aware=true" in text


def test_deploy_refuses_a_delay_aware_policy_of_the_wrong_size_naming_the_actions_in_flight(tmp_path, capsys,
                                                                                             monkeypatch):
    from robot_rl.policies.actor_policy import ActorPolicy
    from robot_rl.policies.io import save_policy

    meta = {"delay": {"steps": 3, "aware": True, "choices": [3], "control_dt": 0.05}}
    save_policy(ActorPolicy(STATE_DIM, 4, hidden=[16]), tmp_path / "policy", meta)  # no room for the actions
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    with served_robot() as address:
        capsys.readouterr()
        code = main(["deploy", f"robot={address}", "step_timeout_s=5", f"checkpoint={tmp_path / 'policy'}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and f"maps {STATE_DIM} states to 4 actions" in err and "(+ 12 in flight)" in err, err


def test_eval_of_an_exported_delay_aware_policy_runs_it_under_its_trained_delay(tmp_path, capsys):
    """`eval policy=` builds the env with the policy's own delay (without it the policy's input would not fit)."""
    from robot_rl.export import export

    run, _ = _delay_checkpoint(tmp_path)
    out = export(run, tmp_path / "exported")
    assert main(["eval", f"policy={out}", "env.spec=arm:reach", "episodes=2"]) == 0
    assert "under its trained delay of 3 steps (150 ms)" in capsys.readouterr().out
