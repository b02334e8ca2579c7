"""Several seeds of one configuration: `robot-rl train ... seed=0,1,2,3,4 jobs=2` (also `finetune`).

Each seed is its own run directory `<run_dir>/seed_<s>`, trained by its own `robot-rl` process (`jobs` at a
time, one torch thread each unless `threads=` is given), logging into `<run_dir>/seed_<s>/output.log`. When
all have finished, `<run_dir>/seeds.json` holds the statistics over seeds at every evaluation step (mean and
IQM with 95% bootstrap intervals, `robot_rl.stats`) and `<run_dir>/curves.png` the IQM curve with its band.

Running the same command again continues: a seed whose run finished is kept, one that was interrupted is
resumed from its latest checkpoint, one that never started is started. `robot-rl aggregate <run dirs>` makes
the same statistics from run directories that already exist.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from robot_rl import stats
from robot_rl.errors import UserError

MAX_JOBS = 16


class SeedsError(UserError, ValueError):
    """A mistake in the seed list or jobs; one line."""


def parse_seeds(value: str) -> list[int]:
    """'0,1,2' or '0-4' (inclusive) -> [0, 1, 2, ...]; duplicates are an error (they would share a directory)."""
    seeds: list[int] = []
    try:
        for part in value.split(","):
            lo, dash, hi = part.strip().partition("-")
            seeds += list(range(int(lo), int(hi) + 1)) if dash else [int(lo)]
    except ValueError:
        raise SeedsError(f"seed={value}: expected seeds >= 0 such as seed=0,1,2 or seed=0-4") from None
    if len(set(seeds)) != len(seeds):
        raise SeedsError(f"seed={value}: a seed appears twice")
    if not seeds:
        raise SeedsError("seed= is empty")
    return seeds


def split_seed_overrides(overrides: list[str]) -> tuple[list[int] | None, int, list[str]]:
    """(seeds or None for a single run, jobs, the remaining overrides). A single `seed=3` is an ordinary run."""
    seeds, jobs, rest = None, 1, []
    for o in overrides:
        key, _, value = o.partition("=")
        if key == "seed" and ("," in value or "-" in value):
            seeds = parse_seeds(value)
        elif key == "jobs":
            try:
                jobs = int(value)
            except ValueError:
                raise SeedsError(f"jobs={value}: expected a number of runs at a time, e.g. jobs=2") from None
            if not 1 <= jobs <= MAX_JOBS:
                raise SeedsError(f"jobs={value}: must be between 1 and {MAX_JOBS}")
        else:
            rest.append(o)
    if seeds is None and jobs != 1:
        raise SeedsError("jobs= runs several seeds at a time: give a seed list too, e.g. seed=0,1,2,3,4 jobs=2")
    return seeds, jobs, rest


def _finished(run_dir: Path, steps: int) -> bool:
    try:
        curve = stats.load_curve(run_dir)
    except FileNotFoundError:
        return False
    return bool(curve) and max(curve) >= steps


def run_seeds(
    command: str, overrides: list[str], seeds: list[int], jobs: int, base_dir: Path, steps: int,
    quiet: bool = False,
) -> dict:
    """Train every seed (resuming interrupted ones), then aggregate. Returns the `seeds.json` content."""
    base_dir.mkdir(parents=True, exist_ok=True)
    if not any(o.startswith("threads=") for o in overrides):
        overrides = [*overrides, "threads=1"]  # runs side by side: one thread each is fastest on small nets
    pending: list[tuple[int, list[str]]] = []
    for s in seeds:
        run_dir = base_dir / f"seed_{s}"
        if _finished(run_dir, steps):
            continue
        if (run_dir / "checkpoints" / "latest.pt").is_file():
            args = [f"resume={run_dir}", "quiet=true"]
        else:
            args = [*overrides, f"seed={s}", f"run_dir={run_dir}", "quiet=true"]
        pending.append((s, [sys.executable, "-m", "robot_rl.cli", command, *args]))
    say = (lambda m: None) if quiet else (lambda m: print(m, flush=True))
    say(f"{len(seeds)} seeds in {base_dir} ({len(seeds) - len(pending)} already finished), {jobs} at a time; "
        f"each logs to {base_dir}/seed_<s>/output.log")
    running: list[tuple[int, subprocess.Popen, float]] = []
    failed: list[int] = []
    try:
        while pending or running:
            while pending and len(running) < jobs:
                s, cmd = pending.pop(0)
                (base_dir / f"seed_{s}").mkdir(parents=True, exist_ok=True)
                log = open(base_dir / f"seed_{s}" / "output.log", "a")  # noqa: SIM115 (closed with the process)
                running.append((s, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.monotonic()))
                log.close()
                say(f"seed {s}: started")
            for item in list(running):
                s, proc, t0 = item
                if proc.poll() is not None:
                    running.remove(item)
                    status = "done" if proc.returncode == 0 else f"failed (exit {proc.returncode}, see output.log)"
                    if proc.returncode != 0:
                        failed.append(s)
                    say(f"seed {s}: {status} after {time.monotonic() - t0:.0f}s")
            time.sleep(0.5)
    except KeyboardInterrupt:
        for _, proc, _ in running:
            proc.send_signal(2)  # each run saves its checkpoint on Ctrl-C
        for _, proc, _ in running:
            proc.wait()
        say("interrupted; run the same command again to continue the unfinished seeds")
        raise
    done = [base_dir / f"seed_{s}" for s in seeds if s not in failed and _finished(base_dir / f"seed_{s}", steps)]
    summary = aggregate(done, base_dir, title=base_dir.name)
    summary["failed_seeds"] = failed
    stats.write_json(summary, base_dir / "seeds.json")
    return summary


def aggregate(run_dirs: list[Path], out_dir: Path, title: str = "", metric: str = "eval_return_mean") -> dict:
    """Statistics over `run_dirs` into `out_dir/seeds.json` and `out_dir/curves.png` (plus the success rate when
    the runs record one)."""
    if not run_dirs:
        raise SeedsError("no finished run to aggregate")
    summary = {metric: stats.summarize_runs(run_dirs, metric)}
    if not summary[metric]["curve"]:  # nothing to compare: say which steps each run has rather than fail later
        raise SeedsError(f"the runs share no evaluation step with a value of {metric}: {_eval_steps(run_dirs, metric)}; "
                         "aggregate runs of one configuration (the same train.eval_every), once each has evaluated")
    try:
        success = stats.summarize_runs(run_dirs, "success_rate")
        if success["curve"]:
            summary["success_rate"] = success
    except (KeyError, ValueError):
        pass
    stats.plot_curves({title or out_dir.name: summary[metric]}, out_dir / "curves.png", title=title)
    stats.write_json(summary, out_dir / "seeds.json")
    return summary


def _eval_steps(run_dirs: list[Path], metric: str) -> str:
    """`<run> steps a..b (n)` per run (`no values` where it has none): why their curves do not meet."""
    parts = []
    for d in run_dirs:
        steps = sorted(stats.load_curve(d, metric))
        parts.append(f"{d} steps {steps[0]:,.0f}..{steps[-1]:,.0f} ({len(steps)})" if steps else f"{d} no values")
    return ", ".join(parts)


def describe(summary: dict, metric: str = "eval_return_mean") -> str:
    """The lines printed at the end: final IQM/mean with intervals, per metric."""
    lines = []
    for name in (metric, "success_rate"):
        if name in summary:
            final = summary[name]["final"]
            step = final.get(summary[name]["x"])
            digits = 2 if name == "success_rate" else 1
            lines.append(f"{name} at step {step:,.0f}: {stats.format_summary(final, digits)}")
    return "\n".join(lines)
