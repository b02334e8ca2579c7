"""Summary of run.sh's pixel push runs: success at 10k, 20k, 30k and 40k env steps per seed and over seeds (mean,
IQM, 95% bootstrap interval), and the curves with bands beside state-based RLPD on the same task (the committed
`../push_rlpd/rlpd_sac_40k_s*`, 3 seeds), and how each run's latest policy fails on 50 held-out episodes (the
state runs' classes: `../push_rlpd/summarize.py`'s `failure_modes`). Copies each run's small files (config,
metrics, log; no checkpoints) next to this script."""

from __future__ import annotations

import importlib.util
import json
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


GROUPS = {  # run-name prefix -> (label, command)
    "rlpd": ("RLPD from cameras, 20 demos", "robot-rl train experiment=rlpd_push_pixels threads=1 seed=SEED (run.sh SEED; "
             "the scene before 2026-11-27)"),
    "mirror": ("RLPD from cameras, 20 demos, both mirrors",
               "GROUP=mirror run.sh SEED -- data.mirror=true train.mirror_online=true train.replay_capacity=82000 "
               "(the symmetric scene)"),
}


def _seed(run: Path) -> str:
    return run.name.rsplit("_s", 1)[1]


def _earlier_failure_modes(group: str) -> dict | None:
    """The held-out failure classes the last summary recorded for `group` (the rlpd runs' were measured in the scene
    they trained in, before it became symmetric on 2026-11-27; measuring them again now would change the scene)."""
    path = HERE / "summary.json"
    if group != "rlpd" or not path.exists():
        return None
    earlier = json.loads(path.read_text())
    return earlier.get("groups", {}).get(group, {}).get("failure_modes_final") or earlier.get("failure_modes_final")


def _group(runs: list[Path], group: str, command: str) -> dict:
    per_step = {}
    for step in STEPS:
        at = {_seed(r): round(100 * load_curve(r, "success_rate")[step], 1)
              for r in runs if step in load_curve(r, "success_rate")}
        per_step[step] = {"success_percent": at, "summary": summarize(list(at.values())) if at else None}
    failure_modes = _state_summary().failure_modes
    return {
        "command": command,
        "wall_time_s": {_seed(r): round(max(load_curve(r, "wall_time_s").values())) for r in runs},
        "success_at": {str(k): v for k, v in per_step.items()},
        # the latest checkpoint of each run, 50 held-out episodes
        "failure_modes_final": _earlier_failure_modes(group) or {
            _seed(r): failure_modes(r / "checkpoints" / "latest.pt", pixel_size=(48, 48)) for r in runs},
    }


def main() -> None:
    os.chdir(ROOT)
    summary = {
        "task": "arm:push-sparse-pixels (front and wrist cameras 48x48 + 7 proprioception numbers; sparse reward 1 on "
                "success, which ends the episode; 100-step time limit)",
        "demos": "20 scripted expert episodes at 48x48 (robot-rl collect ... policy=expert episodes=20, seed 0)",
        "steps": "40k env steps = agent steps (action repeat 1), 1 env, one update per step, batches of 64",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor",
        "groups": {},
    }
    curves = {}
    for group, (label, command) in GROUPS.items():
        runs = [r for r in sorted(RUNS.glob(f"{group}_s[0-9]*")) if r.is_dir() and load_curve(r, "success_rate")]
        if not runs:  # the run directories are gone (another checkout): the files copied here last time
            runs = [r for r in sorted(HERE.glob(f"{group}_s[0-9]*")) if r.is_dir() and load_curve(r, "success_rate")]
        if not runs:
            continue
        summary["groups"][group] = _group(runs, group, command)
        for run in runs:
            if run.parent != HERE:
                copy_run_files(run, HERE / run.name, logs={"output.log": run.parent / f"{run.name}.log"})
            print(run.name, {k: v["success_percent"].get(_seed(run))
                             for k, v in summary["groups"][group]["success_at"].items()})
        curves[f"{label} ({len(runs)} seed{'s' if len(runs) > 1 else ''})"] = summarize_runs(runs, "success_rate")
    write_json(summary, HERE / "summary.json")
    state = sorted((HERE.parent / "push_rlpd").glob("rlpd_sac_40k_s[0-9]*"))
    if state:
        curves[f"RLPD from state, 20 demos, no mirrors ({len(state)} seeds)"] = summarize_runs(state, "success_rate")
    plot_curves(curves, HERE / "success.png", title="arm:push-sparse(-pixels), gamma 0.95", ylabel="success rate")


if __name__ == "__main__":
    main()
