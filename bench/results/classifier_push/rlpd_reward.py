"""Summary of rlpd_reward.sh: RLPD on arm:push-sparse trained on the reward classifier's reward, against the same
preset on the task's reward (bench/results/push_rlpd's rlpd_sac_mirror_online_utd2 runs, read from their committed
copies). Per seed: success at 10k and 20k env steps (20 deterministic evaluation episodes every 2k env steps, the
task's own success), success of the final weights on 50 held-out episodes (seeds 1000-1049); over seeds mean, IQM and
95% bootstrap intervals; the curves with bands (rlpd_reward.png). The issue's target: within 10 points of RLPD on
the true reward. Usage: python rlpd_reward.py (every round in ROUNDS whose runs exist)

Round 1: the classifier trained on 20 labelled expert episodes. Round 2 (HIL-SERL's second round of labels): the
same setting trained again with the frames of 10 episodes of round 1's policies (5 each of seeds 0 and 1, `robot-rl
collect policy=<checkpoint>`), labelled by the task's success (all failures), as more negatives (`sweep.py ...
--extra`; 30 labelled episodes in all). Round 3: the same with 10 more episodes of round 2's policies (40 in all).
Then round 3's classifier with training episodes that go on past the task's success (`rlpd_reward.sh ... --
env.end_on_task_success=false`, with 1 frame and with 2 frames in a row), as on a robot, where no simulator ends an
episode at its success."""

from __future__ import annotations

import json
import re
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


def seed_of(run: Path) -> str:
    """`s0` (rlpd_reward.sh's runs) or `<group>_s0` (push_rlpd's) -> "0"."""
    return run.name.rsplit("_s", 1)[-1].lstrip("s")


def group(runs: list[Path], held: dict[str, float | None]) -> dict:
    at = {step: {seed_of(r): round(100 * load_curve(r, "success_rate").get(step, float("nan")), 1) for r in runs}
          for step in (10_000, 20_000)}
    # the share of training episodes the classifier ended with a success the task did not have, 10k-20k env steps
    # (metrics.csv's learned-reward column; absent in runs older than it and in runs on the task's reward)
    false = {}
    for r in runs:
        late = [v for k, v in load_curve(r, "train_reward_false_success").items() if k >= 10_000]
        if late:
            false[seed_of(r)] = round(100 * sum(late) / len(late), 1)
    return {"runs": [str(r.relative_to(ROOT)) if r.is_relative_to(ROOT) else str(r) for r in runs],
            "false_success_percent_10k_20k": false,
            "success_percent_10k": at[10_000], "success_percent_20k": at[20_000],
            "summary_20k": summarize(list(at[20_000].values())),
            "held_out_percent": held, "summary_held_out": summarize([v for v in held.values() if v is not None])}


ENDS_AT_TASK = "threshold 0.5, 1 frame; the task's own success still ends a training episode"
GOES_ON = "env.end_on_task_success=false: only the classifier or the time limit ends a training episode"
ROUNDS = {  # name: (runs folder, classifier, its held-out figures on the 50 expert episodes, reward rule)
    "round 1": ("clf_rlpd", "long_s0", "sweep setting `long` (front camera, 5,000 steps, batches of 32, seed 0, 20 "
                "expert episodes): held-out precision 83.2%, recall 89.2%", ENDS_AT_TASK),
    "round 2": ("clf_rlpd_r2", "mined_s0", "the same setting trained on the 20 expert episodes and 10 episodes of "
                "round 1's policies (sweep_mined.json)", ENDS_AT_TASK),
    "round 3": ("clf_rlpd_r3", "mined2_s0", "the same setting trained on the 20 expert episodes, the 10 round-1 "
                "policy episodes and 10 episodes of round 2's policies (seeds 0 and 1; sweep_mined2.json)",
                ENDS_AT_TASK),
    "round 3, past the task's success": ("clf_rlpd_r3_noend", "mined2_s0", "round 3's classifier",
                                         f"threshold 0.5, 1 frame; {GOES_ON}"),
    "round 3, past the task's success, 2 frames in a row": (
        "clf_rlpd_r3_noend_k2", "mined2_s0", "round 3's classifier",
        f"threshold 0.5, 2 frames in a row (env.reward_classifier_consecutive=2); {GOES_ON}"),
    "position readouts": (
        "clf_rlpd_readout", "runs/clf48/r10_readout_s0", "sweep setting r10_readout (sweep_48_readout.json: the front "
        "camera's 13 position estimates from the frozen sim-pretrained ResNet-10's readout, 48x48, 2,000 steps, "
        "batches of 64, seed 0, 20 expert episodes): held-out precision 76.1%, recall 89.7%", ENDS_AT_TASK),
}


def copies(folder: str) -> Path:
    """Where a round's run files are kept next to this script."""
    return HERE / ("rlpd_reward" if folder == "clf_rlpd" else f"rlpd_reward_{folder[9:]}")


def finished(where: Path) -> list[Path]:
    """The runs in `where` that reached 20k env steps."""
    return sorted(r for r in where.glob("s[0-9]*")
                  if (r / "metrics.csv").is_file() and 20_000 in load_curve(r, "success_rate"))


def main() -> None:
    rounds = {}
    for name, (folder, clf, described, rule) in ROUNDS.items():
        # the runs, or where they are gone (another checkout) the files copied here last time
        runs = finished(ROOT / "runs" / folder) or finished(copies(folder))
        if not runs:
            continue
        rounds[name] = {"classifier": f"{clf if '/' in clf else f'runs/clf/{clf}'}: {described}",
                        "reward_rule": rule, **group(runs, {seed_of(r): held_out(r) for r in runs})}
        for r in runs:
            if r.parent != copies(folder):
                copy_run_files(r, copies(folder) / r.name, files=("config.yaml", "metrics.csv", "heldout.log"),
                               logs={"output.log": r.parent / f"{r.name}.log"})
        rounds[name]["runs_dir"] = folder
    if not rounds:
        raise SystemExit("no runs: run rlpd_reward.sh first")
    modes = json.loads((TRUE_REWARD[0].parent / "summary.json").read_text())["groups"][
        "rlpd_sac_mirror_online_utd2"]["failure_modes"]  # the same 50 held-out episodes, for those runs
    true = group(TRUE_REWARD, {seed: 100 * m["success"] / m["episodes"] for seed, m in modes.items()})
    for r in rounds.values():
        r["gap_points_20k"] = round(true["summary_20k"]["mean"] - r["summary_20k"]["mean"], 1)
    summary = {
        "task": "arm:push-sparse; training reward = the classifier's verdict on the front camera's frame (64x64; "
                "48x48 for the position readouts) each action led to (each group's reward_rule), evaluation = the "
                "task's success",
        "learner": "experiment=rlpd_push (20 expert demos, half of each batch; both mirrors; agent.optimiser.utd=2), state only",
        "steps": "20k env steps = agent steps (action repeat 1), 1 env",
        "evaluation": "every 2k env steps, 20 deterministic episodes; final weights on 50 held-out episodes "
                      "(seeds 1000-1049)",
        "classifier_reward": rounds, "true_reward": true, "target": "within 10 points of RLPD on the true reward",
    }
    write_json(summary, HERE / "rlpd_reward.json")
    curves = {f"RLPD, classifier reward, {name}": summarize_runs([ROOT / g for g in r["runs"]], "success_rate")
              for name, r in rounds.items()}
    curves["RLPD, task reward (push_rlpd)"] = summarize_runs(TRUE_REWARD, "success_rate")
    plot_curves(curves, HERE / "rlpd_reward.png", title="arm:push-sparse, RLPD + 20 demos", ylabel="success rate")
    for name, r in rounds.items():
        print(f"{name}:", r["success_percent_20k"], r["held_out_percent"], "| gap", r["gap_points_20k"])
    print("true:", true["success_percent_20k"])


if __name__ == "__main__":
    main()
