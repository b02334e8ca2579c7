"""Summary of run.sh's push runs: success at 10k and 20k env steps per seed and over seeds (mean, IQM, 95% bootstrap
interval) for each (experiment, agent) that has runs, plus the curves with bands. Copies each run's small files
(config, metrics, log; no checkpoints) next to this script."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from robot_rl.stats import load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
RUNS = Path("runs") / "push_rlpd"  # relative to ROOT, as the summary records them
LABELS = {"rlpd": "RLPD, 20 demos", "sac": "SAC from scratch"}


def main() -> None:
    os.chdir(ROOT)
    groups: dict[str, list[Path]] = {}
    for run in sorted(RUNS.glob("*_s[0-9]*")):
        if run.is_dir() and (run / "metrics.csv").is_file() and load_curve(run, "success_rate"):
            groups.setdefault(run.name.rsplit("_s", 1)[0], []).append(run)
    summary: dict = {
        "task": "arm:push-sparse (sparse reward 1 on success, which ends the episode; 100-step time limit)",
        "demos": "20 scripted expert episodes (robot-rl collect ... policy=expert episodes=20, seed 0)",
        "steps": "20k env steps = agent steps (action repeat 1), 1 env",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor",
        "groups": {},
    }
    curves = {}
    for name, runs in groups.items():
        kind, agent = name.split("_", 1)
        at = {}
        for step in (10_000, 20_000):
            per_seed = {}
            for run in runs:
                curve = load_curve(run, "success_rate")
                if step in curve:
                    per_seed[run.name.rsplit("_s", 1)[1]] = round(100 * curve[step], 1)
            at[step] = per_seed
        summary["groups"][name] = {
            "experiment": f"{kind}_push", "agent": agent,
            "success_percent_10k": at[10_000], "success_percent_20k": at[20_000],
            "summary_10k": summarize(list(at[10_000].values())) if at[10_000] else None,
            "summary_20k": summarize(list(at[20_000].values())) if at[20_000] else None,
        }
        curves[f"{LABELS[kind]} (agent={agent})"] = summarize_runs(runs, "success_rate")
        for run in runs:
            dest = HERE / run.name
            dest.mkdir(exist_ok=True)
            for f in ("config.yaml", "metrics.csv", "learning_curve.png"):
                if (run / f).is_file():
                    shutil.copy2(run / f, dest / f)
            shutil.copy2(run.parent / f"{run.name}.log", dest / "output.log")
        print(name, "20k:", at[20_000], summary["groups"][name]["summary_20k"])
    write_json(summary, HERE / "summary.json")
    plot_curves(curves, HERE / "success.png", title="arm:push-sparse, 20k env steps", ylabel="success rate")


if __name__ == "__main__":
    main()
