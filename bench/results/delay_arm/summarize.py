"""Success of each variant of run.sh on each task: per seed, 100 deterministic episodes of the final checkpoint under
the delay it was trained with (eval_latest.txt), the mean over seeds with a 95% bootstrap interval
(robot_rl.stats), the delay-aware and naive means as fractions of the no-delay mean, and the best of the 10-episode
evaluations during training; copies each run's small files (config, metrics, eval line) beside summary.json."""

from __future__ import annotations

import csv
import json
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from robot_rl.stats import bootstrap_ci, copy_run_files

HERE = Path(__file__).resolve().parent
VARIANTS = ("nodelay", "naive", "aware", "drawn")  # drawn: aware under a delay drawn per episode from 3-7 steps


def _final(seed_dir: Path, name: str = "eval_latest.txt") -> tuple[float, float]:
    """(success rate, mean return) of the 100-episode evaluation of the final checkpoint (``name``)."""
    text = (seed_dir / name).read_text()
    success = re.search(r"success rate (\d+)%", text)
    ret = re.search(r"return (-?[\d.]+)", text)
    if not success or not ret:
        raise SystemExit(f"{seed_dir}/{name} has no result line: {text[-300:]}")
    return float(success.group(1)) / 100.0, float(ret.group(1))


def main(root: str) -> None:
    summary: dict[str, dict] = {}
    for task_dir in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        task = summary[task_dir.name] = {}
        for variant in VARIANTS:
            seeds = sorted(p for p in (task_dir / variant).glob("seed_*") if (p / "eval_latest.txt").is_file())
            if not seeds:
                continue
            finals, returns, best10, steps = [], [], [], 0
            for seed_dir in seeds:
                success, ret = _final(seed_dir)
                finals.append(success)
                returns.append(ret)
                rows = list(csv.DictReader(open(seed_dir / "metrics.csv")))
                best10.append(max(float(r["success_rate"]) for r in rows if r.get("success_rate")))
                steps = int(rows[-1]["env_step"])
                dest = HERE / task_dir.name / variant / seed_dir.name
                copy_run_files(seed_dir, dest)
                shutil.copy2(seed_dir / "eval_latest.txt", dest / "eval_latest.txt")
            under = [_final(p, "eval_under_delay.txt")[0] for p in seeds if (p / "eval_under_delay.txt").is_file()]
            for p in seeds:
                if (p / "eval_under_delay.txt").is_file():
                    shutil.copy2(p / "eval_under_delay.txt", HERE / task_dir.name / variant / p.name)
            low, high = bootstrap_ci(finals, np.mean)
            task[variant] = {"seeds": [int(p.name.split("_")[1]) for p in seeds], "final_success": finals,
                             "final_mean": float(np.mean(finals)), "final_ci95": [low, high],
                             "final_return": returns, "best_10_episode_eval": best10, "env_steps": steps}
            if under:  # the no-delay policies deployed under the 5-step delay
                task[variant]["under_delay_success"] = under
                task[variant]["under_delay_mean"] = float(np.mean(under))
                task[variant]["under_delay_ci95"] = list(bootstrap_ci(under, np.mean))
        nodelay = task.get("nodelay", {}).get("final_mean")
        for variant in ("naive", "aware", "drawn"):
            if variant in task and nodelay:
                task[variant]["fraction_of_nodelay"] = task[variant]["final_mean"] / nodelay
        for variant, r in task.items():
            frac = f"  ({r['fraction_of_nodelay']:.2f} of no delay)" if "fraction_of_nodelay" in r else ""
            print(f"{task_dir.name:6s} {variant:8s} {r['final_mean']:6.1%} [{r['final_ci95'][0]:.0%}, "
                  f"{r['final_ci95'][1]:.0%}]  per seed {', '.join(f'{v:.0%}' for v in r['final_success'])}{frac}")
            if "under_delay_mean" in r:
                print(f"{'':6s} {variant:8s} policy under the delay {r['under_delay_mean']:6.1%}  per seed "
                      f"{', '.join(f'{v:.0%}' for v in r['under_delay_success'])}")
    protocol = ("default agent, 5-step delay (250 ms at 20 Hz) for naive and aware, drawn per episode from 3-7 steps "
                "for drawn (delay-aware), env steps = agent steps (no action "
                "repeat), final checkpoint evaluated on 100 deterministic episodes under its training delay, mean over "
                "seeds with a 95% bootstrap interval")
    (HERE / "summary.json").write_text(json.dumps({"protocol": protocol, **summary}, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/delayarm")
