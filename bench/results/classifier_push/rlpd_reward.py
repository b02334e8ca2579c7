"""Summary of rlpd_reward.sh: RLPD on arm:push-sparse trained on the reward classifier's reward, against the same
preset on the task's reward (bench/results/push_rlpd's rlpd_sac_mirror_online_utd2 runs, read from their committed
copies). Per seed: success at 10k and 20k env steps (20 deterministic evaluation episodes every 2k env steps, the
task's own success), success of the final weights on 50 held-out episodes (seeds 1000-1049); over seeds mean, IQM and
95% bootstrap intervals; the curves with bands (rlpd_reward.png). The issue's target: within 10 points of RLPD on
the true reward. Usage: python rlpd_reward.py [runs/clf_rlpd]"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
TRUE_REWARD = sorted((ROOT / "bench" / "results" / "push_rlpd").glob("rlpd_sac_mirror_online_utd2_s[0-9]*"))


def held_out(run: Path) -> float | None:
    """Success (%) of `robot-rl eval run=<run> checkpoint=latest episodes=50 seed=1000`, from its log."""
    log = run / "heldout.log"
    found = re.search(r"success rate (\d+)%", log.read_text()) if log.is_file() else None
    return float(found.group(1)) if found else None


def group(runs: list[Path], held: dict[str, float | None]) -> dict:
    at = {step: {r.name.rsplit("_s", 1)[-1].lstrip("s"): round(100 * load_curve(r, "success_rate").get(step, float("nan")), 1)
                 for r in runs} for step in (10_000, 20_000)}
    return {"runs": [str(r.relative_to(ROOT)) if r.is_relative_to(ROOT) else str(r) for r in runs],
            "success_percent_10k": at[10_000], "success_percent_20k": at[20_000],
            "summary_20k": summarize(list(at[20_000].values())),
            "held_out_percent": held, "summary_held_out": summarize([v for v in held.values() if v is not None])}


def main() -> None:
    runs_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "runs" / "clf_rlpd"
    runs = sorted(r for r in runs_dir.glob("s[0-9]*") if r.is_dir() and (r / "metrics.csv").is_file())
    if not runs:
        raise SystemExit(f"no runs in {runs_dir}: run rlpd_reward.sh first")
    classifier = group(runs, {r.name[1:]: held_out(r) for r in runs})
    modes = json.loads((TRUE_REWARD[0].parent / "summary.json").read_text())["groups"][
        "rlpd_sac_mirror_online_utd2"]["failure_modes"]  # the same 50 held-out episodes, for those runs
    true = group(TRUE_REWARD, {seed: 100 * m["success"] / m["episodes"] for seed, m in modes.items()})
    for r in runs:
        copy_run_files(r, HERE / "rlpd_reward" / r.name, files=("config.yaml", "metrics.csv", "heldout.log"),
                       logs={"output.log": r.parent / f"{r.name}.log"})
    gap = true["summary_20k"]["mean"] - classifier["summary_20k"]["mean"]
    summary = {
        "task": "arm:push-sparse; training reward = the classifier's verdict on the front camera's 64x64 frame each "
                "action led to (threshold 0.5, 1 frame; the task's own success still ends episodes), evaluation = "
                "the task's success",
        "classifier": "bench/results/classifier_push sweep setting `long` (front camera, 5,000 steps, batches of 32, "
                      "seed 0, trained on 20 episodes): held-out precision 83.2%, recall 89.2%",
        "learner": "experiment=rlpd_push (20 expert demos, half of each batch; both mirrors; agent.utd=2), state only",
        "steps": "20k env steps = agent steps (action repeat 1), 1 env",
        "evaluation": "every 2k env steps, 20 deterministic episodes; final weights on 50 held-out episodes "
                      "(seeds 1000-1049)",
        "classifier_reward": classifier, "true_reward": true,
        "gap_points_20k": round(gap, 1), "target": "within 10 points of RLPD on the true reward",
    }
    write_json(summary, HERE / "rlpd_reward.json")
    plot_curves({"RLPD, classifier reward": summarize_runs(runs, "success_rate"),
                 "RLPD, task reward (push_rlpd)": summarize_runs(TRUE_REWARD, "success_rate")},
                HERE / "rlpd_reward.png", title="arm:push-sparse, RLPD + 20 demos", ylabel="success rate")
    print("classifier:", classifier["success_percent_20k"], classifier["held_out_percent"], "| true:",
          true["success_percent_20k"], "| gap", round(gap, 1))


if __name__ == "__main__":
    main()
