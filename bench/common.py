"""Plumbing shared by the benchmarks: flags, timing, the machine's description, result files and tables, and a
Trainer that keeps its evaluation time apart from its training time."""

from __future__ import annotations

import argparse
import csv
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from robot_rl.agents.sac import OptimiserConfig
from robot_rl.device import cpu_has_native_bf16
from robot_rl.trainer import Trainer

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
RESULTS_DIR = BENCH_DIR / "results"
NEVER = 10**12  # an eval/checkpoint interval no run reaches


def parser(description: str) -> argparse.ArgumentParser:
    """The flags every part understands, so `python -m bench.<part>` and `python -m bench.run` agree."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="short runs for development; figures are indicative only")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads, the same for both libraries")
    p.add_argument("--device", default="cpu", help="torch device of both libraries' learners (cpu, cuda)")
    p.add_argument("--out", type=Path, default=None, help="also write this part's figures to a JSON file")
    p.add_argument("--compile", action="store_true", help="add rows for robot_rl with agent.optimiser.compile=true")
    p.add_argument("--bf16", action="store_true", help="add rows for robot_rl with agent.optimiser.bf16=true")
    return p


def setup(args: argparse.Namespace) -> int:
    """Apply the shared flags; returns the torch thread count both libraries will run with."""
    if args.threads:
        torch.set_num_threads(args.threads)
    return torch.get_num_threads()


# -- timing -------------------------------------------------------------------------------------------------
def sync(device: str | torch.device) -> None:
    """Wait for queued device work, so a wall-clock reading covers it (a no-op on CPU)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def time_per_call(fn: Callable[[], Any], calls: int, repeats: int, device: str, warmup: int = 2) -> list[float]:
    """Seconds per call of `fn`, one figure per repeat of `calls` back-to-back calls (after `warmup` calls)."""
    for _ in range(warmup):
        fn()
    sync(device)
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        sync(device)
        out.append((time.perf_counter() - t0) / calls)
    return out


def interleaved_times(steps: dict[str, Callable[[], Any]], rounds: int, calls: int, warmup: int = 2,
                      digits: int = 1) -> dict[str, list[float]]:
    """{name: median seconds per call of each round}: every function timed in turn, round after round, so a change
    of the machine's load reaches all of them alike; a line per round."""
    times: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(rounds):
        for name, fn in steps.items():
            times[name].append(median(time_per_call(fn, calls, 1, "cpu", warmup=warmup)))
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {t[-1] * 1e3:.{digits}f} ms" for n, t in times.items()),
              flush=True)
    return times


def round_ratio(times: dict[str, list[float]], name: str, reference: str) -> float:
    """The median over rounds of `name`'s time over `reference`'s in the same round."""
    return median([a / b for a, b in zip(times[name], times[reference], strict=True)])


def median(xs: Sequence[float]) -> float:
    return float(statistics.median(xs))


def ratio(num: Any, den: Any) -> float | None:
    """num / den where both are positive numbers (not None, not 'not reached')."""
    ok = all(isinstance(x, int | float) and x > 0 for x in (num, den))
    return num / den if ok else None


# -- what the figures were measured on ----------------------------------------------------------------------
def cpu_times() -> list[int] | None:
    """The aggregate ``cpu`` line of /proc/stat (Linux): user nice system idle iowait irq softirq steal ..."""
    try:
        with open("/proc/stat") as f:
            return [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None


def cpu_fractions(before: list[int] | None, after: list[int] | None) -> dict[str, float] | None:
    """Between two `cpu_times()`: the busy fraction (not idle, not waiting for I/O) and the fraction the
    hypervisor stole, which on a shared VM, rather than the code measured, can set a timing's tail."""
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    d = [b - a for a, b in zip(before[:8], after[:8], strict=True)]
    total = max(1, sum(d))
    return {"busy": 1.0 - (d[3] + d[4]) / total, "steal": d[7] / total}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], cwd=REPO_DIR, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def machine_info(threads: int, device: str) -> dict[str, Any]:
    """Hardware, software versions and load: enough to tell whether two result files are comparable."""
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30 if hasattr(os, "sysconf") else None
    info: dict[str, Any] = {
        "cpu": cpu_model(),
        # torch's vector ISA and whether bf16 matmuls run in hardware: this project's VMs have been Intel Xeons
        # with AMX and AVX2-only AMD EPYCs, and bf16 timings differ ~100x between them
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_native_bf16": cpu_has_native_bf16(),
        "cores": os.cpu_count(),
        "memory_gib": round(mem_gib, 1) if mem_gib else None,
        # A loaded machine makes every timing noisy; the load average says how loaded it was.
        "load_average": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "os": platform.platform(),
        "python": sys.version.split()[0],
        "torch_threads": threads,
        "device": device,
        "gpu": torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else None,
        "versions": {d: _version(d) for d in ("robot-rl", "torch", "mujoco", "gymnasium", "dm_control",
                                                "stable_baselines3", "numpy")},
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
    }
    return info


# -- results ------------------------------------------------------------------------------------------------
def write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    tmp.replace(path)  # never leave a half-written result file behind
    return path


def results_path(name: str) -> Path:
    """A results file that does not exist yet: ``bench/results/<date>-<name>.json``, else ``<date>-<name>-2.json``,
    ``-3``, ... A second run on the same day (perhaps on another machine, whose figures differ) never overwrites a
    results file that docs cite."""
    day = datetime.date.today().isoformat()
    path, n = RESULTS_DIR / f"{day}-{name}.json", 2
    while path.exists():
        path, n = RESULTS_DIR / f"{day}-{name}-{n}.json", n + 1
    return path


def fmt(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]], columns: Sequence[str] | None = None) -> str:
    """A markdown table of `rows` (columns: the given ones, or every key in first-seen order)."""
    if not rows:
        return ""
    if columns is None:
        columns = list(dict.fromkeys(k for r in rows for k in r))
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in columns) + " |" for r in rows]
    return "\n".join(lines)


ROW_COLUMNS = ("benchmark", "metric", "robot_rl", "sb3", "ratio", "target", "note")


def row(benchmark: str, metric: str, ours: float | None, sb3: float | None = None, target: str = "",
        note: str = "", ratio_value: float | None = None, compare: bool = True) -> dict[str, Any]:
    """One line of the summary table. The ratio is ours / SB3 unless given (e.g. SB3 / ours for times), and
    absent with compare=False, where the two figures are not the same work."""
    if compare and ratio_value is None:
        ratio_value = ratio(ours, sb3)
    return {"benchmark": benchmark, "metric": metric, "robot_rl": ours, "sb3": sb3,
            "ratio": ratio_value if compare else None, "target": target, "note": note}


def timing_main(description: str, name: str, run: Callable[[argparse.Namespace], dict[str, Any]],
                default_size: int, size_help: str, calls_help: str, argv: list[str] | None = None,
                rounds: int = 3) -> dict[str, Any]:
    """A standalone timing script's `main` (`pixel_update_cost`, `hil_weight_sync`): flags for frame size, interleaved
    rounds, calls per round, threads and the results file; `run(args)` gives the part; the machine and the wall
    time are added, the table printed and ``bench/results/<date>-<name>.json`` (or ``--out``) written."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--size", type=int, default=default_size, help=size_help)
    p.add_argument("--rounds", type=int, default=rounds, help="interleaved rounds of every variant")
    p.add_argument("--calls", type=int, default=10, help=calls_help)
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the learning runs use 1)")
    p.add_argument("--out", default=None, help=f"results file (default bench/results/<date>-{name}.json)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    part = run(args)
    part["machine"] = machine_info(args.threads, "cpu")
    part["wall_s"] = time.perf_counter() - t0
    print(markdown_table(part["rows"], ROW_COLUMNS))
    out = write_json(Path(args.out) if args.out else results_path(name), part)
    print(f"wrote {out}")
    return part


def finish(args: argparse.Namespace, part: dict[str, Any]) -> dict[str, Any]:
    """End of a part's standalone `main`: print its table, write its JSON if asked."""
    print(markdown_table(part["rows"], ROW_COLUMNS))
    if args.out:
        write_json(args.out, part)
    return part


# -- robot_rl runs ------------------------------------------------------------------------------------------
class StopRun(Exception):
    """Raised from an evaluation hook to end a run early: threshold reached, budget spent, or measurement done."""


class TimedTrainer(Trainer):
    """A robot_rl Trainer that records (monotonic clock) when its first update finished, keeps evaluation,
    logging, plotting and checkpoint time apart from training time, and stops at a return threshold or a
    training-time budget (checked at evaluations), or at its first evaluation (`stop_at_first_eval`).

    Subclassed here rather than in robot_rl because these hooks exist only to measure."""

    def __init__(self, cfg: Any, run_dir: Path, *, threshold: float | None = None, max_train_s: float | None = None,
                 stop_at_first_eval: bool = False) -> None:
        super().__init__(cfg, run_dir)
        self.threshold, self.max_train_s, self.stop_at_first_eval = threshold, max_train_s, stop_at_first_eval
        self.excluded_s = 0.0  # evaluation + logging + checkpoints: not training
        self.first_update_done_t: float | None = None
        self.first_update_step = 0
        self.first_eval_t: float | None = None
        self.curve: list[dict[str, float]] = []
        self.reached: dict[str, float] | None = None
        update = self.agent.update

        def update_and_clock(batch: Any) -> Any:
            out = update(batch)
            if self.first_update_done_t is None:
                self.first_update_done_t, self.first_update_step = time.monotonic(), self.env_steps
            return out

        self.agent.update = update_and_clock

    def _evaluate_and_log(self, *a: Any, **kw: Any) -> None:
        t0 = time.monotonic()
        self.first_eval_t = self.first_eval_t or t0
        if self.stop_at_first_eval:
            raise StopRun
        train_s = self._wall_time() - self.excluded_s
        super()._evaluate_and_log(*a, **kw)
        self.excluded_s += time.monotonic() - t0
        point = {"env_step": self.env_steps, "return": self.last_eval_return, "train_s": round(train_s, 2)}
        self.curve.append(point)
        if self.threshold is not None and self.last_eval_return >= self.threshold:
            self.reached = point
            raise StopRun
        if self.max_train_s is not None and train_s >= self.max_train_s:
            raise StopRun

    def save_checkpoint(self) -> None:
        t0 = time.monotonic()
        super().save_checkpoint()
        self.excluded_s += time.monotonic() - t0


def run_trainer(trainer: TimedTrainer) -> TimedTrainer:
    """Run to the end or to a StopRun; returns the trainer for its clocks."""
    try:
        trainer.run()
    except StopRun:
        pass
    return trainer


def first_row_at(metrics_csv: Path, threshold: float) -> dict[str, str] | None:
    """The first metrics.csv row whose mean evaluation return reaches `threshold`."""
    with open(metrics_csv, newline="") as f:
        return next((r for r in csv.DictReader(f) if float(r["eval_return_mean"]) >= threshold), None)


def variants(args: argparse.Namespace) -> tuple[dict[str, list[str]], list[str]]:
    """robot_rl variants to measure: fp32 always, plus --compile / --bf16 where the agent's optimiser group has the switch.
    Returns {name: extra overrides} and the names asked for but not available in this checkout."""
    fields = {f.name for f in dataclasses.fields(OptimiserConfig)}
    asked = [name for name in ("compile", "bf16") if getattr(args, name, False)]
    found = {"fp32": []} | {name: [f"agent.optimiser.{name}=true"] for name in asked if name in fields}
    return found, [name for name in asked if name not in fields]
