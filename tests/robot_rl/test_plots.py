"""Run comparison plots: the CLI draws any metric against env steps or wall time from runs' metrics.csv."""

import csv
import subprocess
import sys
from pathlib import Path


def write_run(path: Path, rows: list[dict]) -> Path:
    path.mkdir(parents=True)
    with open(path / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def test_compare_runs_by_return_against_wall_time(tmp_path: Path) -> None:
    a = write_run(tmp_path / "a", [{"env_step": 0, "wall_time_s": 1.0, "eval_return_mean": 5.0, "success_rate": ""},
                                   {"env_step": 10, "wall_time_s": 3.0, "eval_return_mean": 9.0, "success_rate": ""}])
    b = write_run(tmp_path / "b", [{"env_step": 0, "wall_time_s": 2.0, "eval_return_mean": 4.0, "success_rate": ""}])
    out = tmp_path / "cmp.png"
    cmd = [sys.executable, "-m", "robot_rl.plots", str(out), f"a={a}", f"b={b}", "--metric", "eval_return_mean",
           "--x", "wall_time_s", "--title", "t"]
    subprocess.run(cmd, check=True, cwd=Path(__file__).resolve().parents[2])
    assert out.stat().st_size > 1000
    bad = subprocess.run([sys.executable, "-m", "robot_rl.plots", str(out), "no-label"], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode == 2 and "label" in bad.stderr


def test_log_x_axis_changes_the_plot(tmp_path: Path) -> None:
    rows = [{"env_step": s, "wall_time_s": 1.0, "success_rate": v} for s, v in [(0, 0.3), (1000, 0.4), (10**6, 0.8)]]
    run = write_run(tmp_path / "r", rows)
    repo = Path(__file__).resolve().parents[2]
    outs = {}
    for flag in ([], ["--logx"]):
        out = tmp_path / f"plot{len(flag)}.png"
        subprocess.run([sys.executable, "-m", "robot_rl.plots", str(out), f"r={run}", *flag], check=True, cwd=repo)
        outs[bool(flag)] = out.read_bytes()
    assert outs[True] != outs[False]


def test_default_metric_is_one_the_runs_have(tmp_path: Path) -> None:
    """Without --metric, runs without success (Pendulum, Hopper) are drawn by return; before, the default
    success_rate gave a blank plot and exit 0. A metric no run has is an error naming the columns."""
    from robot_rl.plots import plot_comparison

    run = write_run(tmp_path / "r", [{"env_step": 0, "wall_time_s": 1.0, "eval_return_mean": 5.0, "success_rate": ""},
                                     {"env_step": 10, "wall_time_s": 2.0, "eval_return_mean": 7.0, "success_rate": ""}])
    assert plot_comparison({"r": run}, tmp_path / "a.png") == "eval_return_mean"
    bad = subprocess.run([sys.executable, "-m", "robot_rl.plots", str(tmp_path / "b.png"), f"r={run}", "--metric",
                          "success_rate"], capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode == 2 and "no run has values of 'success_rate'" in bad.stderr
    assert "eval_return_mean" in bad.stderr and not (tmp_path / "b.png").exists()


def test_a_missing_run_is_one_line(tmp_path: Path) -> None:
    """Was a FileNotFoundError traceback from read_metrics (issue 56, item 4)."""
    bad = subprocess.run([sys.executable, "-m", "robot_rl.plots", str(tmp_path / "c.png"), f"a={tmp_path / 'nope'}"],
                         capture_output=True, text=True, cwd=Path(__file__).resolve().parents[2])
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1, bad.stderr
    assert f"a={tmp_path / 'nope'}: does not exist" in bad.stderr
