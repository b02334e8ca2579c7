"""`robot-rl collect` refuses an `out=` that would spoil a dataset or a run, in one line, before building an env."""

from pathlib import Path

from robot_rl.cli import main
from robot_rl.datasets import read_dataset

ONE = ["episodes=1", "env.num_envs=1", "env.max_episode_steps=10"]


def test_appending_another_task_is_refused_unless_task_names_it(tmp_path: Path, capsys) -> None:
    """Was exit 0 and a dataset mixing reach and push episodes (issue 56, item 5)."""
    out = tmp_path / "reach"
    assert main(["collect", "env.spec=arm:reach", *ONE, f"out={out}"]) == 0
    capsys.readouterr()
    assert main(["collect", "env.spec=arm:push", *ONE, f"out={out}", "append=true"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out} holds episodes of task reach, not push (env.spec=arm:push)" in err, err
    assert "task=push" in err
    assert len(read_dataset(out).episodes) == 1
    assert main(["collect", "env.spec=arm:reach", *ONE, f"out={out}", "append=true"]) == 0  # the same task: fine
    assert len(read_dataset(out).episodes) == 2


def test_out_in_a_run_directory_is_refused(tmp_path: Path, capsys) -> None:
    """Was a dataset's meta/ and data/ written among the run's files (issue 56, item 5)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("env:\n  spec: arm:reach\n")
    assert main(["collect", "env.spec=arm:reach", *ONE, f"out={run}"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"out={run} is a run directory (it holds config.yaml)" in err, err
    assert sorted(p.name for p in run.iterdir()) == ["config.yaml"]
