"""Run logging: one CSV row per evaluation, the same scalars to TensorBoard or Weights & Biases (`logger=`), plus a
live progress line."""

from __future__ import annotations

import csv
import importlib.util
import math
import os
import sys
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple, TextIO

from torch import Tensor

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


EPISODE_KEYS = ("episode_return", "success")  # one value per finished episode, not per update


class Episodes(NamedTuple):
    """Per-env values at one step, of which only those where `done` count (no host sync to select them)."""

    values: Tensor
    done: Tensor


class MetricMean:
    """Means of metrics over the updates (and finished episodes) between two log rows: the one averaging helper.

    `add` sums each metric as it comes (device tensors stay on the device: no `.item()` in the hot loop) and
    counts it once; the keys in `EPISODE_KEYS` count one per finished episode instead (a 1-D tensor of
    finished episodes, or `Episodes(values, done)`). `means` divides once, at logging time: on the device in
    the tensors' own dtype (`on_host=False`), or as Python floats (`on_host=True`, what the policy
    fine-tuning runs have always logged; the two differ in the last bits of float32 metrics).
    """

    def __init__(self, on_host: bool = False) -> None:
        self.on_host = on_host
        self.sums: dict[str, Tensor | float] = {}
        self.counts: dict[str, Tensor | int] = {}

    def add(self, metrics: Mapping[str, Tensor | float | list[Tensor] | Episodes]) -> None:
        """One step's metrics: a value per update (a list: one value per update, in order) or, under
        `EPISODE_KEYS`, the finished episodes."""
        for k, v in metrics.items():
            if isinstance(v, list):
                for x in v:
                    self._add(k, x, 1)
            elif isinstance(v, Episodes):
                self._add(k, (v.values * v.done).sum(), v.done.sum())
            elif k in EPISODE_KEYS:
                self._add(k, v.sum(), v.numel())
            else:
                self._add(k, v, 1)

    def _add(self, key: str, total: Tensor | float, count: Tensor | int) -> None:
        if key in self.sums:
            self.sums[key] = self.sums[key] + total
            self.counts[key] = self.counts[key] + count
        else:
            self.sums[key] = total.detach().clone() if isinstance(total, Tensor) else total
            self.counts[key] = count

    def means(self) -> dict[str, float]:
        """{key: mean} of the keys with at least one value."""
        out = {}
        for k, total in self.sums.items():
            count = self.counts[k]
            if not count:
                continue
            if self.on_host:
                out[k] = float(total) / int(count)
            else:
                out[k] = (total / count).item() if isinstance(total, Tensor) else total / count
        return out

    def reset(self) -> None:
        self.sums, self.counts = {}, {}


_TIME_KEYS = {"wall_time_s", "eval_time_s", "env_steps_per_s", "updates"}


def tensorboard_tag(key: str) -> str:
    """TensorBoard groups a CSV column by prefix: `eval/` (evaluation), `train/` (training episodes), `time/`
    (clock, rate, counters) and `update/` (what the learner's updates report: losses, Q, temperature, ...)."""
    if key.startswith("eval_") and key not in _TIME_KEYS:
        return "eval/" + key[len("eval_"):]
    if key == "success_rate":
        return "eval/success_rate"
    if key.startswith("train_"):
        return "train/" + key[len("train_"):]
    if key in _TIME_KEYS:
        return "time/" + key
    return "update/" + key


LOGGERS = ("tensorboard", "wandb", "none")  # where the scalars go besides the CSV (`logger=`)
WANDB_MODES = ("online", "offline", "disabled")
WANDB_ID_FILE = "wandb_run_id"  # in the run directory: a resumed run continues the same W&B run
_TAG_GROUPS = ("eval", "train", "time", "update")


def wandb_missing() -> bool:
    """True when `logger=wandb` cannot work: checked when the config is validated, so the run fails at start."""
    return importlib.util.find_spec("wandb") is None


def start_wandb(run_dir: Path, config: dict[str, Any], project: str, entity: str | None, mode: str | None,
                resume: bool) -> Any:
    """The run's one W&B run (offline pretraining and online training log into it, under their own step axes).

    Its files go to `$WANDB_DIR` if set, else into the run directory (`<run_dir>/wandb/`), beside the CSV and
    TensorBoard files; `mode=None` leaves the choice to wandb (`$WANDB_MODE`, else online). The W&B run id is
    kept in `<run_dir>/wandb_run_id`, so resuming the run continues the same W&B run instead of starting one.
    """
    if wandb_missing():  # validate() checks this first; a library user calling the Runner directly lands here
        raise ImportError("logger=wandb needs the wandb package: pip install 'robot_rl[wandb]'")
    import wandb

    id_file = run_dir / WANDB_ID_FILE
    run_id = id_file.read_text().strip() if resume and id_file.is_file() else None
    if run_id is None:
        run_id = uuid.uuid4().hex[:12]
        id_file.write_text(run_id + "\n")
    return wandb.init(
        project=project, entity=entity, mode=mode, id=run_id, resume="allow", name=run_dir.name,
        dir=os.environ.get("WANDB_DIR") or str(run_dir), config=config,
    )


class MetricsLogger:
    """Appends rows to a CSV (flushed at once, so a killed run keeps every row) and to TensorBoard and/or a W&B
    run, under the same grouped tags (`tensorboard_tag`).

    One per phase of a run: `metrics.csv` keyed by `env_step` (the Runner), `offline_metrics.csv` keyed by
    `offline_step` (offline pretraining, TensorBoard under `tensorboard/offline`, W&B tags under `offline/`).
    On resume, rows after `resume_step` are dropped, since those steps are about to run again. `tensorboard=False`
    writes no TensorBoard files (`logger=wandb` or `logger=none`); `wandb_run` is the run's W&B run, if any, which
    the caller owns (it outlives this logger: offline pretraining and training share it).
    """

    def __init__(
        self,
        run_dir: Path,
        resume_step: int | None = None,
        columns: list[str] | None = None,
        file_name: str = "metrics.csv",
        step_key: str = "env_step",
        tensorboard_dir: str = "tensorboard",
        tensorboard: bool = True,
        wandb_run: Any = None,
        wandb_prefix: str = "",
    ) -> None:
        self.csv_path = run_dir / file_name
        self.step_key = step_key
        self.columns = METRIC_COLUMNS if columns is None else columns
        if resume_step is not None and self.csv_path.exists():
            self._truncate_after(resume_step)
        new_file = not self.csv_path.exists()
        self._file = open(self.csv_path, "a", newline="")
        self._csv = csv.DictWriter(self._file, fieldnames=self.columns, extrasaction="ignore")
        if new_file:
            self._csv.writeheader()
            self._file.flush()
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # slow import: only when a run starts

            self._tb = SummaryWriter(str(run_dir / tensorboard_dir), purge_step=resume_step)
        self._wandb, self._prefix = wandb_run, wandb_prefix
        if wandb_run is not None:
            # each phase plots against its own step (env_step, offline_step), not wandb's call counter, so a
            # resumed run's repeated steps overwrite in the charts instead of extending them
            step_metric = wandb_prefix + step_key
            wandb_run.define_metric(step_metric)
            for group in _TAG_GROUPS:
                wandb_run.define_metric(f"{wandb_prefix}{group}/*", step_metric=step_metric)

    def _truncate_after(self, step: int) -> None:
        """Drop rows logged after the checkpoint we resume from: those steps are about to be run again."""
        with open(self.csv_path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if int(float(r[self.step_key])) <= step]
        with open(self.csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=self.columns, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)

    def log(self, row: dict[str, float | None]) -> None:
        self._csv.writerow({k: ("" if v is None else v) for k, v in row.items()})
        self._file.flush()
        step = int(row[self.step_key])
        scalars = {
            tensorboard_tag(key): value for key, value in row.items()
            if key != self.step_key and value is not None and not (isinstance(value, float) and math.isnan(value))
        }
        if self._tb is not None:
            for tag, value in scalars.items():
                self._tb.add_scalar(tag, value, step)
            self._tb.flush()
        if self._wandb is not None:
            p = self._prefix
            self._wandb.log({p + self.step_key: step, **{p + tag: value for tag, value in scalars.items()}})

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics(csv_path: Path) -> list[dict[str, float | None]]:
    with open(csv_path, newline="") as f:
        return [{k: (float(v) if v not in ("", None) else None) for k, v in r.items()} for r in csv.DictReader(f)]


class _Lines:
    """A stream for tqdm in a log file: each redraw becomes one plain line (no carriage returns)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


class Progress:
    """The live progress bar (tqdm): steps, rate and ETA measured by tqdm over this process's own steps (a resumed
    run's earlier steps do not inflate the rate), plus the last evaluation's return and losses. On a terminal it
    redraws in place; into a log file it writes a line every `log_interval_s`."""

    def __init__(self, total_steps: int, quiet: bool = False, interval_s: float = 0.5, log_interval_s: float = 30.0,
                 initial: int = 0, delay_s: float = 1.0, shows_eval: bool = False) -> None:
        self.total, self.quiet, self.initial = total_steps, quiet, initial
        self.shows_eval = shows_eval  # "eval —" until the first evaluation (a run that evaluates; not pretraining)
        self.tty = sys.stderr.isatty()
        self._options = dict(mininterval=interval_s if self.tty else log_interval_s, delay=delay_s)
        self._bar: Any = None  # made at the first update: set-up and pretraining time is not the steps' rate
        self._closed = False
        self._postfix = ""

    def update(self, step: int, last_eval: float | None = None, losses: Mapping[str, float] | None = None) -> None:
        """Move to `step`; `last_eval` and `losses` (host floats from the last log row) show beside the bar."""
        if self.quiet or self._closed:
            return
        if self._bar is None:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total, initial=self.initial, unit="step", unit_scale=True, dynamic_ncols=True,
                smoothing=0.05, file=sys.stderr if self.tty else _Lines(sys.stderr), ascii=not self.tty,
                **self._options,
            )
        parts = []
        if last_eval is not None and math.isfinite(last_eval):
            parts.append(f"eval {round(last_eval, 1) + 0.0:.1f}")  # + 0.0: a score just below 0 is not "-0.0"
        elif self.shows_eval:
            parts.append("eval —")
        parts += [f"{k} {v:.3g}" for k, v in (losses or {}).items()]
        postfix = " | ".join(parts)
        if postfix != self._postfix:
            self._postfix = postfix
            self._bar.set_postfix_str(postfix, refresh=False)
        if step > self._bar.n:
            self._bar.update(step - self._bar.n)

    def message(self, text: str) -> None:
        """A line that must not be overwritten (evaluation results, warnings)."""
        if self._bar is not None:
            self._bar.write(text, file=sys.stdout)
            sys.stdout.flush()
        else:
            print(text, flush=True)

    def close(self) -> None:
        self._closed = True
        if self._bar is not None:
            self._bar.close()
            self._bar = None
