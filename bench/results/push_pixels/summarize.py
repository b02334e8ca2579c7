"""Summary of run.sh's pixel push runs: success at 10k, 20k, 30k and 40k env steps per seed and over seeds (mean,
IQM, 95% bootstrap interval), and the curves with bands beside state-based RLPD on the same task (the committed
`../push_rlpd/rlpd_sac_40k_s*`, 3 seeds), and how each run's latest policy fails on 50 held-out episodes (the
state runs' classes: `../push_rlpd/summarize.py`'s `failure_modes`). Copies each run's small files (config,
metrics, log; no checkpoints) next to this script."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
RUNS = Path("runs") / "push_pixels"  # relative to ROOT, as the summary records them
STEPS = (10_000, 20_000, 30_000, 40_000)


def _state_summary() -> ModuleType:
    """`../push_rlpd/summarize.py`, whose `failure_modes` the camera runs share, loaded by path: its module name is
    this script's own."""
    spec = importlib.util.spec_from_file_location("push_rlpd_summarize", HERE.parent / "push_rlpd" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    os.chdir(ROOT)
    runs = [r for r in sorted(RUNS.glob("rlpd_s[0-9]*")) if r.is_dir() and load_curve(r, "success_rate")]
    per_step = {}
    for step in STEPS:
        at = {r.name.rsplit("_s", 1)[1]: round(100 * load_curve(r, "success_rate")[step], 1)
              for r in runs if step in load_curve(r, "success_rate")}
        per_step[step] = {"success_percent": at, "summary": summarize(list(at.values())) if at else None}
    summary = {
        "task": "arm:push-sparse-pixels (front and wrist cameras 48x48 + 7 proprioception numbers; sparse reward 1 on "
                "success, which ends the episode; 100-step time limit)",
        "demos": "20 scripted expert episodes at 48x48 (robot-rl collect ... policy=expert episodes=20, seed 0)",
        "command": "robot-rl train experiment=rlpd_push_pixels threads=1 seed=SEED (run.sh SEED)",
        "steps": "40k env steps = agent steps (action repeat 1), 1 env, one update per step, batches of 64",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor",
        "wall_time_s": {r.name.rsplit("_s", 1)[1]: round(max(load_curve(r, "wall_time_s").values()))
                        for r in runs},
        "success_at": {str(k): v for k, v in per_step.items()},
    }
    failure_modes = _state_summary().failure_modes
    summary["failure_modes_final"] = {  # the latest checkpoint of each run, 50 held-out episodes
        r.name.rsplit("_s", 1)[1]: failure_modes(r / "checkpoints" / "latest.pt", pixel_size=(48, 48)) for r in runs
    }
    for run in runs:
        copy_run_files(run, HERE / run.name, logs={"output.log": run.parent / f"{run.name}.log"})
        print(run.name, {k: v["success_percent"].get(run.name.rsplit("_s", 1)[1]) for k, v in per_step.items()})
    write_json(summary, HERE / "summary.json")
    state = sorted((HERE.parent / "push_rlpd").glob("rlpd_sac_40k_s[0-9]*"))
    seeds = f"{len(runs)} seed" + ("s" if len(runs) > 1 else "")
    curves = {f"RLPD from cameras, 20 demos ({seeds})": summarize_runs(runs, "success_rate")}
    if state:
        curves[f"RLPD from state, 20 demos ({len(state)} seeds)"] = summarize_runs(state, "success_rate")
    plot_curves(curves, HERE / "success.png", title="arm:push-sparse(-pixels), gamma 0.95", ylabel="success rate")


if __name__ == "__main__":
    main()
