"""`robot_rl.logger.MetricsLogger`: one CSV row and grouped TensorBoard scalars per log call."""

from __future__ import annotations

import csv
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from robot_rl.logger import MetricsLogger


def test_tensorboard_tags_are_grouped_and_the_csv_keeps_its_columns(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path)
    logger.log({"env_step": 100, "wall_time_s": 2.0, "eval_return_mean": 5.0, "success_rate": None,
                "train_return_mean": 3.0, "critic_loss": 0.5, "updates": 10, "eval_time_s": 0.5})
    logger.close()
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert set(events.Tags()["scalars"]) == {
        "eval/return_mean", "train/return_mean", "update/critic_loss", "time/wall_time_s", "time/updates",
        "time/eval_time_s",
    }
    assert events.Scalars("eval/return_mean")[0].step == 100
    with open(tmp_path / "metrics.csv", newline="") as f:
        row = next(csv.DictReader(f))
    assert row["eval_return_mean"] == "5.0" and row["critic_loss"] == "0.5" and row["success_rate"] == ""


def test_a_second_logger_keys_its_own_file_by_its_own_step(tmp_path: Path) -> None:
    """Offline pretraining's logger: offline_metrics.csv keyed by offline_step; on resume, rows after the resume
    step are dropped."""
    kw = {"columns": ["offline_step", "critic_loss"], "file_name": "offline.csv", "step_key": "offline_step",
          "tensorboard_dir": "tensorboard/offline"}
    logger = MetricsLogger(tmp_path, **kw)
    for step in (10, 20, 30):
        logger.log({"offline_step": step, "critic_loss": 1.0 / step})
    logger.close()
    MetricsLogger(tmp_path, resume_step=20, **kw).close()
    with open(tmp_path / "offline.csv", newline="") as f:
        assert [int(r["offline_step"]) for r in csv.DictReader(f)] == [10, 20]
    assert not (tmp_path / "metrics.csv").exists()


def test_progress_in_a_log_file_is_plain_lines_with_the_measured_rate(capsys) -> None:
    """Into a log (not a terminal): one line per redraw, no carriage returns; the rate is tqdm's measurement of
    this process's steps (a resumed run's earlier steps are `initial`, not counted as fast steps)."""
    import time

    from robot_rl.logger import Progress

    progress = Progress(1000, interval_s=0.0, log_interval_s=0.0, initial=500, delay_s=0.0)
    for step in range(501, 601):
        progress.update(step, -3.5, {"critic_loss": 0.25})
        time.sleep(0.002)
    progress.message("[eval] a line of its own")
    progress.close()
    captured = capsys.readouterr()
    assert "\r" not in captured.err
    last = captured.err.strip().splitlines()[-1]
    assert "600/1.00k" in last and "eval -3.5 | critic_loss 0.25" in last, last
    rate = float(last.split("step/s")[0].rsplit(" ", 1)[-1].rstrip("k"))
    assert 50 < rate < 600, last  # ~100 steps in ~0.2-0.5 s; counting the initial 500 would give well above 1000
    assert "[eval] a line of its own" in captured.out


def test_progress_shows_eval_dash_until_the_first_evaluation(capsys) -> None:
    """hil-train's bar read "eval -0.0" for a score just below zero; before any evaluation it now says "eval —"
    (issue 56, item 9c)."""
    from robot_rl.logger import Progress

    progress = Progress(100, interval_s=0.0, log_interval_s=0.0, delay_s=0.0, shows_eval=True)
    progress.update(10, None, {"critic_loss": 0.5})
    progress.update(20, -1e-5)
    progress.update(30, float("nan"))
    progress.close()
    lines = capsys.readouterr().err.strip().splitlines()
    assert any("eval — | critic_loss 0.5" in line for line in lines), lines
    assert any("eval 0.0" in line for line in lines) and not any("-0.0" in line or "nan" in line for line in lines)
