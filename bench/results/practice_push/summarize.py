"""run.sh's practice and reset runs side by side: per seed the final checkpoint's success on 100 deterministic
evaluation episodes (eval_latest.txt), the training episodes and the human resets they needed (practice: the run's
human_resets; reset: one per episode), means with 95% bootstrap intervals over seeds (robot_rl.stats); copies each
run's small files beside summary.json."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path

import numpy as np

from robot_rl import checkpoint
from robot_rl.stats import bootstrap_ci, copy_run_files

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2] / "runs" / "practice_push"


def main() -> None:
    summary: dict[str, dict] = {}
    # practice: the scripted reset controller puts the cube back (pushed, or picked up where a push cannot reach) in
    # the practice scene's enclosure (ramps and fences); practice_home: the cube stays where it was. Earlier runs,
    # kept for the record (their run directories renamed): *_rawquat observed the cube's raw quaternion (before its
    # orientation was observed up to the cube's symmetry), practice_nosettle also started episodes with the cube
    # still moving, practice_release's controller opened the hand beside the cube first (2 cm tolerance),
    # practice_handstays (one seed) left the hand where the episode ended, practice_pushonly's controller only
    # pushed (a cube beyond PRACTICE_XY_BOX was a human reset), practice_pick's also picked up, with no enclosure.
    for mode in ("practice", "reset", "practice_pick", "practice_pushonly", "practice_home", "practice_release",
                 "practice_nosettle", "reset_rawquat", "practice_home_rawquat", "practice_handstays"):
        seeds = sorted((p for p in ROOT.glob(f"{mode}_s*") if p.is_dir()), key=lambda p: int(p.name.split("_s")[1]))
        seeds = [p for p in seeds if (p / "eval_latest.txt").is_file()]
        if not seeds:
            continue
        success, episodes, humans, reset_steps = [], [], [], []
        for run in seeds:
            text = (run / "eval_latest.txt").read_text()
            found = re.search(r"success rate (\d+)%", text)
            if not found:
                raise SystemExit(f"{run}/eval_latest.txt has no success rate: {text[-300:]}")
            success.append(int(found.group(1)) / 100)
            last = list(csv.DictReader(open(run / "metrics.csv")))[-1]
            if mode.startswith("practice"):
                n, human = int(float(last["train_episodes"])), int(float(last["human_resets"]))
                reset_steps.append(int(float(last.get("reset_steps") or 0)))
            else:  # a reset run logs no episode count: its episodes end where its replay's do (all 20k fit)
                state = checkpoint.load(run / "checkpoints" / "latest.pt")
                replay, mirrored = state["replay"], state["config"]["train"]["mirror_online"]
                n = human = int((replay["terminated"] | replay["truncated"]).sum()) // (2 if mirrored else 1)
            episodes.append(n)
            humans.append(human)
            dest = HERE / mode / run.name
            copy_run_files(run, dest)
            shutil.copy2(run / "eval_latest.txt", dest / "eval_latest.txt")
        low, high = bootstrap_ci(success, np.mean)
        summary[mode] = {"seeds": [int(p.name.split("_s")[1]) for p in seeds], "final_success": success,
                         "final_mean": float(np.mean(success)), "final_ci95": [low, high],
                         "train_episodes": episodes, "human_resets": humans}
        if mode.startswith("practice") and any(reset_steps):  # the reset controller's robot time, beside the 20k training steps (20 Hz)
            steps = [int(float(list(csv.DictReader(open(run / "metrics.csv")))[-1]["env_step"])) for run in seeds]
            summary[mode]["reset_controller_steps"] = reset_steps
            summary[mode]["robot_minutes"] = [round((n + r) / 20 / 60, 1) for n, r in zip(steps, reset_steps,
                                                                                         strict=True)]
        print(f"{mode:13s} success {np.mean(success):.0%} [{low:.0%}, {high:.0%}] per seed {success}; human resets "
              f"{humans}")
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main()
