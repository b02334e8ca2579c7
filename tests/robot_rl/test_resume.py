"""Kill a training run with SIGKILL mid-way, resume it, and check nothing before the checkpoint is lost."""

import csv
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from robot_rl.checkpoint import load

SMALL_AGENT = ["agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32"]
ARGS = [
    *SMALL_AGENT,
    "train.steps=3000",
    "train.learning_starts=100",
    "train.eval_every=250",
    "env.num_eval_envs=2",
    "env.max_episode_steps=100",
    "train.video=false",
    "quiet=true",
]


def _cli(*args, **kw):
    return subprocess.Popen(
        [sys.executable, "-m", "robot_rl.cli", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        **kw,
    )


def test_sigkill_then_resume_continues_from_latest_checkpoint(tmp_path):
    run = tmp_path / "run"
    proc = _cli(f"run_dir={run}", *ARGS, "train.steps=1500")  # ARGS' 3000 doubled the suite's slowest test
    latest = run / "checkpoints" / "latest.pt"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if latest.exists() and load(latest)["env_steps"] >= 500:
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    killed_at = load(latest)
    step = killed_at["env_steps"]
    assert 500 <= step < 1500
    assert killed_at["replay"]["size"] == step  # the replay buffer is checkpointed with every transition so far

    resumed = _cli(f"resume={run}")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resumed {run} at step {step:,}" in out

    final = load(latest)
    assert final["env_steps"] == 1500
    assert final["updates"] > killed_at["updates"]
    with open(run / "metrics.csv") as f:
        steps = [int(r["env_step"]) for r in csv.DictReader(f)]
    assert steps == list(range(250, 1501, 250)), steps  # no gaps, no duplicates after the resume


def test_corrupt_checkpoint_gives_clear_error(tmp_path):
    run = tmp_path / "run"
    proc = _cli(f"run_dir={run}", *ARGS, "train.steps=300", "train.eval_every=300")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    latest = run / "checkpoints" / "latest.pt"
    latest.write_bytes(latest.read_bytes()[:1000])  # truncated, as a full disk would leave it
    proc = _cli(f"resume={run}")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert "corrupt" in err and err.count("\n") == 1


def test_atomic_save_leaves_old_file_when_interrupted(tmp_path, monkeypatch):
    from robot_rl import checkpoint

    path = tmp_path / "ckpt.pt"
    checkpoint.atomic_save({"format": 1, "value": 1}, path)

    def boom(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", boom)
    try:
        checkpoint.atomic_save({"format": 1, "value": 2}, path)
    except KeyboardInterrupt:
        pass
    assert checkpoint.load(path)["value"] == 1
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temp file left behind

def test_sigterm_saves_a_checkpoint_like_ctrl_c_then_resume_finishes(tmp_path):
    """SIGTERM (a scheduler's or `kill`'s stop) saves latest.pt and exits 130, as Ctrl-C does; before the Runner
    it killed the process with nothing saved since the last periodic checkpoint (here: none)."""
    run = tmp_path / "run"
    args = [*ARGS, "train.steps=800", "train.checkpoint_every=100000"]  # no periodic checkpoint before the end
    proc = _cli(f"run_dir={run}", *args)
    metrics = run / "metrics.csv"
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 2:  # header + the first evaluation
            break
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=300)
    if proc.returncode != 130:  # pytest.fail prints all of it; an assert's message is cut to its first lines
        pytest.fail(f"exit status {proc.returncode}, stderr:\n{err[-6000:]}")
    assert "checkpoint saved" in out and f"robot-rl train resume={run}" in out
    saved = load(run / "checkpoints" / "latest.pt")
    step = saved["env_steps"]
    assert 250 <= step < 800 and saved["replay"]["size"] == step

    resumed = _cli(f"resume={run}")
    out, err = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, err
    assert f"resumed {run} at step {step:,}" in out
    assert load(run / "checkpoints" / "latest.pt")["env_steps"] == 800


def test_resume_with_a_changed_network_key_names_the_key_in_one_line(tmp_path):
    """Was a 6-11 line state_dict size-mismatch dump (issue 56, item 3); now the config keys that changed."""
    run = tmp_path / "run"
    proc = _cli(f"run_dir={run}", *ARGS, "train.steps=200", "train.eval_every=200", "threads=1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    proc = _cli(f"resume={run}", "agent.network.critic_width=64", "threads=1")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2
    assert err.count("\n") == 1, err
    assert "changed since the run was saved: agent.network.critic_width (32 -> 64)" in err
    assert "size mismatch" not in err


def test_resume_on_another_task_is_refused_in_one_line(tmp_path, capsys):
    """Before: resume=<a reach run> env.spec=arm:push (same observation sizes) went on silently on push with the
    reach run's agent and replay."""
    from robot_rl.cli import main

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("env:\n  spec: arm:reach\n")
    (run / "checkpoints" / "latest.pt").write_bytes(b"")
    assert main(["train", f"resume={run}", "env.spec=arm:push"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{run} is a run on arm:reach" in err, err
    assert main(["train", f"resume={run}", "env.spec=arm:reach", "train.steps=0"]) != 0  # the same task passes
    assert "is a run on" not in capsys.readouterr().err
