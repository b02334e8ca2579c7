"""Summary of run.sh: per seed the BC policy's success (the run's step-0 evaluation), each round's OPE values,
decision and measured successes, and the accepted policy's success after the last round, on the same 50 evaluation
starts; means over seeds with 95% bootstrap intervals (robot_rl.stats). Writes summary.json and copies each run's
rl100_rounds.json, metrics.csv and log here."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

from robot_rl.stats import summarize, write_json

HERE = Path(__file__).resolve().parent
RUNS = HERE.parent.parent.parent / "runs" / "rl100_push"
ROUNDS = 3


def main(seeds: list[int]) -> None:
    out: dict = {
        "task": "arm:push-sparse (state, 29 numbers), sparse reward, episode ends at success",
        "start": "the flow BC policy of bench/results/distill_push for the same seed (robot-rl bc policy=flow "
                 "num_inference_steps=10 steps=3000 on the 50 noisy-expert demos data/ft_push_demos)",
        "method": f"robot-rl finetune method=rl100 data=data/ft_push_demos rl100.rounds={ROUNDS} "
                  "rl100.episodes_per_round=20 env.num_envs=10, other rl100 keys at their defaults",
        "evaluation": "50 episodes per evaluation (one per eval env), deterministic (zero noise), the same 50 starts for "
                      "every evaluation of a run; measured for the log, never read by the gate",
        "seeds": seeds,
    }
    rows = {}
    for s in seeds:
        run = RUNS / f"rl100_s{s}"
        rounds_file = run / "rl100_rounds.json"
        if not rounds_file.is_file():
            continue
        rounds = json.loads(rounds_file.read_text())
        if rounds["rounds_done"] < ROUNDS:
            continue
        dest = HERE / f"rl100_s{s}"
        dest.mkdir(exist_ok=True)
        for name in ("rl100_rounds.json", "metrics.csv", "config.yaml"):
            shutil.copy(run / name, dest / name)
        shutil.copy(RUNS / f"rl100_s{s}.log", HERE / f"rl100_s{s}.log")
        with open(run / "metrics.csv") as f:
            evals = [r for r in csv.DictReader(f)]
        bc = 100 * float(evals[0]["success_rate"])
        final = 100 * float(evals[-1]["success_rate"])
        rows[s] = {
            "bc_success": bc, "final_success": final, "gain": final - bc,
            "accepted_rounds": rounds["accepted_rounds"], "env_steps": int(float(evals[-1]["env_step"])),
            "rounds": [{k: r[k] for k in ("round", "ope_current", "ope_candidate", "accepted", "success_current",
                                          "success_candidate", "success_after", "rollout_success_rate")}
                       for r in rounds["rounds"]],
        }
    done = sorted(rows)
    out["seeds_done"] = done
    out["per_seed"] = rows
    if done:
        for key in ("bc_success", "final_success", "gain", "accepted_rounds"):
            out[key] = summarize([rows[s][key] for s in done])
        # was the gate right? per round, the candidate's measured success against the policy it would replace
        decisions = [r for s in done for r in rows[s]["rounds"]]
        out["gate_agreement"] = {
            "rounds": len(decisions),
            "accepted_and_measured_better_or_equal": sum(r["accepted"] and r["success_candidate"] >= r["success_current"]
                                                         for r in decisions),
            "accepted_and_measured_worse": sum(r["accepted"] and r["success_candidate"] < r["success_current"]
                                               for r in decisions),
            "rejected_and_measured_worse_or_equal": sum(not r["accepted"] and r["success_candidate"] <= r["success_current"]
                                                        for r in decisions),
            "rejected_and_measured_better": sum(not r["accepted"] and r["success_candidate"] > r["success_current"]
                                                for r in decisions),
        }
    write_json(out, HERE / "summary.json")
    for s in done:
        r = rows[s]
        print(f"seed {s}: BC {r['bc_success']:.0f}% -> {r['final_success']:.0f}% after {ROUNDS} rounds "
              f"({r['accepted_rounds']} accepted, {r['env_steps']:,} env steps)")
    if done:
        for key in ("bc_success", "final_success", "gain"):
            m = out[key]
            print(f"{key}: {m['mean']:.1f} [{m['mean_ci'][0]:.1f}, {m['mean_ci'][1]:.1f}]")
        print("gate vs measured success:", out["gate_agreement"])


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [0, 1, 2])
