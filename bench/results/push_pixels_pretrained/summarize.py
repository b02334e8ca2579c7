"""Summary of run.sh's runs (RLPD from cameras through the frozen ResNet-10 pretrained in simulation): success at
every 2k env steps per seed and over seeds (mean, IQM, 95% bootstrap interval) at 10k and 20k, each run's final
weights on 50 held-out episodes (`robot-rl eval run=<run> checkpoint=latest episodes=50 seed=1000`, its log
`heldout.log` in the run directory) and how they fail there (`failure_modes`), and the curves with bands beside the same learner from the state
(`../push_rlpd/rlpd_sac_mirror_online_utd2_s*`) and RLPD end to end from the cameras (`../push_pixels/rlpd_s*`).
Copies each run's small files (config, metrics, logs; no checkpoints) next to this script.
Usage: python summarize.py [GROUP]: GROUP rlpd (default; `experiment=rlpd_push_pixels_pretrained`, a learned pooling,
summary.json) or readout (`experiment=rlpd_push_pixels_readout`, the pretraining heads as frozen features,
summary_readout.json); the plot shows every group that has runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RUNS = Path("runs") / "push_pixels_pretrained"  # relative to ROOT
STEPS = (10_000, 20_000)
GROUPS = {"rlpd": ("rlpd_push_pixels_pretrained", "a learned spatial pooling and projection per camera, trained by "
                                                 "the critic loss"),
          "readout": ("rlpd_push_pixels_readout", "the pretraining heads as frozen readouts: 13 position estimates "
                                                  "per camera (agent.encoder.readout)")}


def failure_modes(run: Path, summary: Path) -> dict | None:
    """How the run's latest weights fail on 50 held-out episodes (`../push_rlpd/summarize.py`'s classes, loaded by
    path: its module name is this script's own); the figures saved last time where the checkpoint is gone."""
    checkpoint = run / "checkpoints" / "latest.pt"
    if not checkpoint.exists():
        return json.loads(summary.read_text()).get("failure_modes_final", {}).get(_seed(run)) if summary.exists() else None
    spec = importlib.util.spec_from_file_location("push_rlpd_summarize", HERE.parent / "push_rlpd" / "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.failure_modes(checkpoint, pixel_size=(48, 48))


def _seed(run: Path) -> str:
    return run.name.rsplit("_s", 1)[1]


def held_out(run: Path) -> float | None:
    """Success (%) on the 50 held-out episodes, from the run's `heldout.log` (robot-rl eval's last line)."""
    log = run / "heldout.log"
    if not log.is_file():
        return None
    found = re.findall(r"success rate ([0-9.]+)%", log.read_text())
    return float(found[-1]) if found else None


def group_runs(group: str) -> list[Path]:
    """The group's run directories under runs/, or where those are gone (another checkout) the files copied here."""
    runs = [r for r in sorted(RUNS.glob(f"{group}_s[0-9]*")) if r.is_dir() and load_curve(r, "success_rate")]
    return runs or [r for r in sorted(HERE.glob(f"{group}_s[0-9]*")) if r.is_dir() and load_curve(r, "success_rate")]


def main() -> None:
    group = sys.argv[1] if len(sys.argv) > 1 else "rlpd"
    if group not in GROUPS:
        raise SystemExit(f"unknown group {group!r}; choose one of {', '.join(GROUPS)}")
    experiment, encoder = GROUPS[group]
    out = HERE / ("summary.json" if group == "rlpd" else f"summary_{group}.json")
    os.chdir(ROOT)
    runs = group_runs(group)
    per_step = {}
    for step in STEPS:
        at = {_seed(r): round(100 * load_curve(r, "success_rate")[step], 1)
              for r in runs if step in load_curve(r, "success_rate")}
        per_step[str(step)] = {"success_percent": at, "summary": summarize(list(at.values())) if at else None}
    unfinished = {_seed(r): max(load_curve(r, "success_rate")) for r in runs if STEPS[-1] not in load_curve(
        r, "success_rate")}  # stopped when a session ended; `run.sh SEED` continues them
    runs = [r for r in runs if _seed(r) not in unfinished]
    final = {_seed(r): held_out(r) for r in runs}
    known = [v for v in final.values() if v is not None]
    summary = {
        "task": "arm:push-sparse-pixels (front and wrist cameras 48x48 + 7 proprioception numbers; sparse reward 1 on "
                "success, which ends the episode; 100-step time limit)",
        "command": f"GROUP={group} EXPERIMENT={experiment} bench/results/push_pixels_pretrained/run.sh SEED "
                   f"(robot-rl train experiment={experiment} threads=1 seed=SEED)",
        "backbone": "ResNet-10 pretrained by pretrain_backbone.py (pretrain.json): 30k simulated push frames per "
                    "camera labelled with the scene's positions; frozen in the RL runs",
        "encoder": encoder,
        "demos": "20 scripted expert episodes at 48x48 (robot-rl collect ... policy=expert episodes=20, seed 0)",
        "steps": "20k env steps = agent steps (action repeat 1), 1 env, two critic steps per env step, batches of "
                 "256 (half demos), both mirrors",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor; the final weights "
                      "on 50 held-out episodes (seeds 1000-1049)",
        "wall_time_s": {_seed(r): round(max(load_curve(r, "wall_time_s").values())) for r in runs},
        "success_at": per_step,
        "held_out_final": {"success_percent": final, "summary": summarize(known) if known else None},
        "failure_modes_final": {_seed(r): failure_modes(r, out) for r in runs},
        "unfinished_runs_last_step": unfinished,
    }
    for run in runs:
        if run.parent != HERE:
            logs = {"output.log": run.parent / f"{run.name}.log"}
            if (run / "heldout.log").is_file():
                logs["heldout.log"] = run / "heldout.log"
            copy_run_files(run, HERE / run.name, logs=logs)
        print(run.name, {k: v["success_percent"].get(_seed(run)) for k, v in per_step.items()},
              "held out", final[_seed(run)])
    write_json(summary, out)
    curves = {}
    for name, label in (("readout", "frozen sim-pretrained ResNet-10 + its position readouts"),
                        ("rlpd", "frozen sim-pretrained ResNet-10, learned pooling")):
        if found := group_runs(name):
            curves[f"RLPD from cameras, {label} ({len(found)} seeds)"] = summarize_runs(found, "success_rate")
    state = sorted((HERE.parent / "push_rlpd").glob("rlpd_sac_mirror_online_utd2_s[0-9]*"))
    if state:
        curves[f"the same learner from the state ({len(state)} seeds)"] = summarize_runs(state, "success_rate")
    pixels = sorted((HERE.parent / "push_pixels").glob("rlpd_s[0-9]*"))
    if pixels:
        curves[f"RLPD from cameras, conv encoder end to end, 1 critic step ({len(pixels)} seeds)"] = summarize_runs(
            pixels, "success_rate")
    plot_curves(curves, HERE / "success.png", title="arm:push-sparse(-pixels), RLPD with 20 demos",
                ylabel="success rate")


if __name__ == "__main__":
    main()
