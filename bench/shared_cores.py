"""Runs that share a machine: each run's training throughput beside another run, against the same run alone.

Why: torch's default is one thread per core, and a run's threads wait for each other at every op, so two runs
that each took every core ran several times slower than alone (issue 57). A run that leaves `threads=` unset
now takes its share of the cores among the machine's robot-rl runs (`robot_rl.core_share`). This measures that
default against what it replaced: each run of a pair given `threads=<cores>` (torch's default, what two runs
started together on a quiet machine got before), and against one run alone.

The same `robot-rl train` run (Pendulum-v1, its preset, `--steps` env steps, one evaluation at the end) is started
alone, then twice at the same moment with the default threads, then twice with `threads=<cores>`. Throughput is
the run's `env_steps_per_s` in metrics.csv (training steps over training time; evaluation excluded). Writes
`bench/results/<date>-shared-cores.json`. The figure is only meaningful where nothing else keeps the cores busy:
the load average before and after is in the file.

    python -m bench.shared_cores --steps 3000
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common


def train(run_dir: Path, steps: int, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "robot_rl.cli", "train", "env.spec=gym:Pendulum-v1", f"train.steps={steps}",
           f"train.eval_every={steps}", "train.video=false", "quiet=true", f"run_dir={run_dir}", *extra]
    log = open(run_dir.with_suffix(".log"), "w")  # noqa: SIM115 (closed with the process)
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=common.REPO_DIR)


def rate(run_dir: Path) -> float:
    with open(run_dir / "metrics.csv", newline="") as f:
        return float(list(csv.DictReader(f))[-1]["env_steps_per_s"])


def together(root: Path, name: str, count: int, steps: int, extra: list[str]) -> list[float]:
    dirs = [root / f"{name}_{i}" for i in range(count)]
    procs = [train(d, steps, extra) for d in dirs]
    for p, d in zip(procs, dirs, strict=True):
        if p.wait() != 0:
            raise SystemExit(f"{d}: train failed, see {d.with_suffix('.log')}")
    return [rate(d) for d in dirs]


def run(steps: int) -> dict[str, Any]:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        t0 = time.monotonic()
        alone = together(root, "alone", 1, steps, [])[0]
        shared = together(root, "pair_default", 2, steps, [])
        all_cores = together(root, "pair_all_cores", 2, steps, [f"threads={cores}"])
        elapsed = time.monotonic() - t0
    rows = [
        common.row("two runs sharing the cores", "each run's steps/s vs alone, default threads (share)",
                   min(shared) / alone, target=">= 0.45", note=f"{shared[0]:.1f}, {shared[1]:.1f} vs {alone:.1f}"),
        common.row("two runs sharing the cores", f"each run's steps/s vs alone, threads={cores} each (before)",
                   min(all_cores) / alone, note=f"{all_cores[0]:.1f}, {all_cores[1]:.1f} vs {alone:.1f}"),
    ]
    return {"config": {"task": "gym:Pendulum-v1 (its preset)", "steps": steps, "cores": cores},
            "steps_per_s": {"alone": alone, "pair_default": shared, "pair_all_cores": all_cores},
            "load_average_before": load_before, "load_average_after": os.getloadavg(), "elapsed_s": elapsed,
            "rows": rows}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000, help="env steps per run (default 3000)")
    args = p.parse_args(argv)
    result = run(args.steps)
    result["machine"] = common.machine_info(threads=0, device="cpu")
    path = common.write_json(common.results_path("shared-cores"), result)
    print(common.markdown_table(result["rows"]))
    print(f"results: {path}")
    return result


if __name__ == "__main__":
    main()
