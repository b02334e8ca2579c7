"""Summary of run.sh: each method's evaluation success per seed at every evaluation, the final (20k env steps) and
at 10k, mean and IQM over seeds with 95% bootstrap intervals, JSRL's handover horizon per evaluation. Copies each
run's metrics.csv, config.yaml and log here; writes summary.json."""

from __future__ import annotations

import csv
import shutil
import sys
from pathlib import Path

from robot_rl.stats import summarize, write_json

HERE = Path(__file__).resolve().parent
RUNS = HERE.parent.parent.parent / "runs" / "jsrl_push"


def main(seeds: list[int]) -> None:
    out: dict = {
        "task": "arm:push-sparse (state), sparse reward, episode ends at success",
        "data": "50 noisy-expert demos (noise 0.3, data seed 100; data/ft_push_demos)",
        "methods": {
            "jsrl": "experiment=sac_push jsrl.guide=<flow BC policy of bench/results/distill_push for the same seed, "
                    "10 Euler steps, deterministic; 56/63/59% on its own for seeds 0/1/2>; no prior data",
            "rlpd": "experiment=rlpd_push data.path=data/ft_push_demos (half of each batch from the demos, mirrored)",
        },
        "steps": "20k env steps = agent steps (action repeat 1), 2 critic updates per env step",
        "evaluation": "the learner alone (JSRL: no guide), deterministic, 20 episodes every 2k env steps",
    }
    for method in ("jsrl", "rlpd"):
        per_seed, curves, horizons = {}, {}, {}
        for s in seeds:
            run = RUNS / f"{method}_s{s}"
            if not (run / "metrics.csv").is_file():
                continue
            rows = list(csv.DictReader((run / "metrics.csv").open()))
            if not rows or int(rows[-1]["env_step"]) < 20000:
                continue
            dest = HERE / f"{method}_s{s}"
            dest.mkdir(exist_ok=True)
            for name in ("metrics.csv", "config.yaml"):
                shutil.copy(run / name, dest / name)
            shutil.copy(RUNS / f"{method}_s{s}.log", HERE / f"{method}_s{s}.log")
            curves[s] = {int(r["env_step"]): 100 * float(r["success_rate"]) for r in rows}
            per_seed[s] = {"final": curves[s][20000], "at_10k": curves[s].get(10000)}
            if method == "jsrl":
                horizons[s] = {int(r["env_step"]): int(float(r["jsrl_horizon"])) for r in rows}
        out[method] = {"seeds": sorted(per_seed), "per_seed": per_seed, "curves": curves,
                       "final": summarize([v["final"] for v in per_seed.values()]),
                       "at_10k": summarize([v["at_10k"] for v in per_seed.values()])}
        if horizons:
            out[method]["jsrl_horizon"] = horizons
    write_json(out, HERE / "summary.json")
    for method in ("jsrl", "rlpd"):
        f = out[method]["final"]
        if f["n"]:
            print(f"{method} (seeds {out[method]['seeds']}): final success {f['mean']:.0f}% {f['mean_ci']}, "
                  f"at 10k {out[method]['at_10k']['mean']:.0f}%")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0, 1, 2])
