"""Run logging: one CSV row and one TensorBoard point per evaluation, plus a live progress line."""

from __future__ import annotations

import csv
import math
import sys
import time
from pathlib import Path

# Fixed columns so that metrics.csv keeps one shape across releases and resumes.
METRIC_COLUMNS = [
    "env_step",
    "wall_time_s",
    "eval_return_mean",
    "eval_return_std",
    "success_rate",
    "eval_length_mean",
    "train_return_mean",
    "critic_loss",
    "actor_loss",
    "temperature",
    "entropy",
    "q_mean",
    "updates",
    "env_steps_per_s",
    "eval_time_s",  # cumulative seconds spent evaluating: training time = wall_time_s - eval_time_s
]


class MetricsLogger:
    """Appends rows to `metrics.csv` (flushed at once, so a killed run keeps every row) and to TensorBoard."""

    def __init__(self, run_dir: Path, resume_step: int | None = None, columns: list[str] | None = None) -> None:
        self.csv_path = run_dir / "metrics.csv"
        self.columns = METRIC_COLUMNS if columns is None else columns
        if resume_step is not None and self.csv_path.exists():
            self._truncate_after(resume_step)
        new_file = not self.csv_path.exists()
        self._file = open(self.csv_path, "a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        if new_file:
            self._csv.writeheader()
            self._file.flush()
        from torch.utils.tensorboard import SummaryWriter  # slow import: only when a run starts

        self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step)

    def _truncate_after(self, step: int) -> None:
        """Drop rows logged after the checkpoint we resume from: those steps are about to be run again."""
        with open(self.csv_path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(float(r["env_step"])) <= step]
        with open(self.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)

    def log(self, row: dict[str, float | None]) -> None:
        self._csv.writerow({k: ("" if v is None else v) for k, v in row.items()})
        self._file.flush()
        step = int(row["env_step"])
        for key, value in row.items():
            if key != "env_step" and value is not None and not (isinstance(value, float) and math.isnan(value)):
                self._tb.add_scalar(key, value, step)
        self._tb.flush()

    def close(self) -> None:
        self._file.close()
        self._tb.close()


def read_metrics(csv_path: Path) -> list[dict[str, float | None]]:
    with open(csv_path, newline="") as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in r.items()} for r in csv.DictReader(f)]


class Progress:
    """A live one-line status on a terminal (rewritten in place), or a plain line every `interval_s` in logs."""

    def __init__(self, total_steps: int, quiet: bool = False, interval_s: float = 1.0) -> None:
        self.total, self.quiet = total_steps, quiet
        self.tty = sys.stderr.isatty()
        self.interval_s = interval_s if self.tty else 30.0
        self._last_print = 0.0

    def update(self, step: int, steps_per_s: float, last_eval: float | None, force: bool = False) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self._last_print < self.interval_s:
            return
        self._last_print = now
        eta = (self.total - step) / steps_per_s if steps_per_s > 0 else float("inf")
        eval_text = "n/a" if last_eval is None else f"{last_eval:.1f}"
        line = (
            f"step {step:>9,}/{self.total:,} ({100 * step / self.total:5.1f}%) | {steps_per_s:7.1f} steps/s | "
            f"last eval return {eval_text} | ETA {_fmt_duration(eta)}"
        )
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def message(self, text: str) -> None:
        """A line that must not be overwritten (evaluation results, warnings)."""
        if self.tty and not self.quiet:
            sys.stderr.write("\r\033[K")
        print(text, flush=True)

    def close(self) -> None:
        if self.tty and not self.quiet:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _fmt_duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "--:--"
    seconds = int(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"
