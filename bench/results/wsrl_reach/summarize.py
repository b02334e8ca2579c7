"""Summary of run.sh's WSRL and naive fine-tuning runs on arm:reach (or with TASK=push, arm:push: runs/wsrl_push
summarised into ../wsrl_push; with TASK=push-sparse, arm:push-sparse into ../wsrl_push_sparse): per seed, the
pretrained policy's success
(the step-0 evaluation of the online run, and the offline curve), the lowest online evaluation and the step where
it came, the success at 20k env steps; over seeds, mean, IQM and 95% bootstrap intervals; the curves with bands.
The issue's WSRL criterion: no online evaluation below the offline policy's success. Copies each run's small files
(config, metrics, log) next to this script."""

from __future__ import annotations

import os
from pathlib import Path

from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

TASK = os.environ.get("TASK", "reach")
if TASK not in ("reach", "push", "push-sparse"):
    raise SystemExit(f"TASK must be reach, push or push-sparse, got {TASK}")
ROOT = Path(__file__).resolve().parents[3]
FOLDER = {"reach": "wsrl_reach", "push": "wsrl_push", "push-sparse": "wsrl_push_sparse"}[TASK]
# RESULTS=<folder under bench/results> and RUNS=<dir> summarise another round of runs into a folder of its own
# (e.g. runs on a re-recorded dataset, whose pretrainings differ from the ones summarised here)
FOLDER = os.environ.get("RESULTS", FOLDER)
HERE = ROOT / "bench" / "results" / FOLDER
# FROM_COPIES=1 re-summarises the run files committed beside this script (the runs themselves stay in runs/)
FROM_COPIES = os.environ.get("FROM_COPIES") == "1"
RUN_DIR = Path(os.environ.get("RUNS", Path("runs") / ("wsrl" if TASK == "reach" else FOLDER)))  # run.sh's runs
RUNS = HERE if FROM_COPIES else RUN_DIR
DATA = {"reach": "data/reach_mixed", "push": "data/push_mixed", "push-sparse": "data/push_sparse_mixed"}[TASK]
ABOUT = {  # what differs between the tasks
    "reach": {
        "task": "arm:reach, dense reward (minus the distance to the target); success = within 3 cm, which ends the "
                "episode; 50-step time limit",
        "data": "data/reach_mixed: 50 expert, 50 noisy-expert (noise 1.0), 50 random episodes (3,125 transitions)",
        "evaluation": "every 1k env steps, 20 episodes (one per eval env), deterministic actor; step 0 = the "
                      "pretrained policy",
    },
    "push": {
        "task": "arm:push, dense shaped reward; success = cube within 5 cm of the target, which ends the episode; "
                "100-step time limit",
        "data": "data/push_mixed: 20 expert, 20 noisy-expert (noise 1.0), 10 random episodes (3,162 transitions; the "
                "collect commands in configs/experiment/wsrl_push.yaml)",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor; step 0 = the "
                      "pretrained policy",
    },
    "push-sparse": {
        "task": "arm:push-sparse, reward 1 on success (cube within 5 cm of the target, which ends the episode), else "
                "0; 100-step time limit; experiment=wsrl_push_sparse: rlpd_push's gamma 0.95, two critic steps per "
                "env step and mirrored online data",
        "data": "data/push_sparse_mixed: 20 expert, 20 noisy-expert (noise 1.0), 10 random episodes (3,162 "
                "transitions; the collect commands in configs/experiment/wsrl_push_sparse.yaml)",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor; step 0 = the "
                      "pretrained policy",
    },
}[TASK]
ABOUT["data"] = os.environ.get("DATA_NOTE", ABOUT["data"])  # a re-recorded dataset says what it holds
LABELS = {  # run.sh's KIND[_TAG]
    "wsrl": "WSRL (5k warm-up, then online SAC)",
    "naive": "naive fine-tuning (updates from step 0)",
    "rlpd": "RLPD (no pretraining, half of each batch from the data)",
    "wsrl_frozen": "WSRL, statistics frozen",
    "naive_frozen": "naive, statistics frozen",
    "wsrl_frozen_cw2k": "WSRL, statistics frozen, 2k critic-only updates first",
    "wsrl_frozen_cw2k_t001": "WSRL, statistics frozen, 2k critic-only updates first, temperature from 0.001",
    "wsrl_frozen_t001": "WSRL, statistics frozen, temperature from 0.001, no critic-only updates",
    "naive_frozen_t001": "naive, statistics frozen, temperature from 0.001",
    "wsrl_cw2k": "WSRL, 2k critic-only updates first",
    "wsrl_cw5k": "WSRL, 5k critic-only updates first",
    "wsrl_preserve_cw2k": "WSRL, statistics updated preserving the networks' outputs, 2k critic-only updates first",
    "wsrl_preserve_cw2k_alr1e-4": "the same, actor learning rate 1e-4",
    "wsrl_mix": "WSRL keeping the dataset in half of each batch after pretraining (data.mix_online=true)",
    "wsrl_mix40k": "WSRL keeping the dataset in half of each batch, to 40k env steps (resume=)",
    "rlpd40k": "RLPD, continued to 40k env steps (resume=)",
}

if TASK != "reach":  # experiment=wsrl_push (and wsrl_push_sparse) sets train.critic_warmup_updates=2000 (reach's best setting)
    LABELS["wsrl"] = "WSRL (5k warm-up, 2k critic-only updates, then online SAC)"
PLOTTED = ("wsrl", "naive", "rlpd", "wsrl_cw2k", "wsrl_preserve_cw2k", "wsrl_mix40k", "rlpd40k")  # the rest: in the json
PLOTTED = tuple(os.environ["PLOT"].split(",")) if os.environ.get("PLOT") else PLOTTED  # PLOT=kind,kind: these


def per_run(run: Path) -> dict:
    """One run's figures; RLPD has no pretrained policy (no step-0 evaluation) and so no dip.

    The dip is judged twice: on success (the issue's criterion) and on the evaluation return, the objective the
    learner maximises. On a dense-reward task they can disagree: a policy that ends nearer the target on average
    but inside the success radius less often has a better return and a lower success (`return_at_lowest_success`
    against `offline_policy_return`)."""
    curve = {int(k): 100 * v for k, v in load_curve(run, "success_rate").items()}
    returns = {int(k): v for k, v in load_curve(run, "eval_return_mean").items()}
    online = {k: v for k, v in curve.items() if k > 0}
    online_returns = {k: v for k, v in returns.items() if k > 0}
    low_step = min(online, key=online.get)
    low_return_step = min(online_returns, key=online_returns.get)
    first_100 = min((k for k, v in online.items() if v == 100), default=None)
    out = {"lowest_online_success": round(online[low_step], 1), "lowest_at_env_step": low_step,
           "return_at_lowest_success": round(returns[low_step], 2),
           "lowest_online_return": round(online_returns[low_return_step], 2),
           "lowest_return_at_env_step": low_return_step,
           "first_env_step_at_100": first_100, "success_20k": round(online.get(20_000, float("nan")), 1),
           "evaluations": len(online), "last_env_step": max(online), "success_last": round(online[max(online)], 1)}
    if 0 in curve:
        start, start_return = curve[0], returns[0]
        out |= {"offline_policy_success": round(start, 1), "dip_points": round(start - online[low_step], 1),
                "evaluations_below_offline": sum(v < start for v in online.values()),
                "offline_policy_return": round(start_return, 2),
                "return_dip": round(start_return - online_returns[low_return_step], 2),
                "evaluations_below_offline_return": sum(v < start_return for v in online_returns.values())}
    return out


def main() -> None:
    os.chdir(ROOT)
    summary: dict = {
        "task": ABOUT["task"],
        "data": ABOUT["data"],
        "pretraining": "IQL, expectile 0.9, running observation normalisation (agent.network.obs_norm=true), 20k offline "
                       "steps, one pretraining per seed shared by both methods",
        "online": "20k env steps = agent steps (action repeat 1), 1 env, online data only (data.mix_online=false), "
                  "but the wsrl_mix group: half of each batch from the dataset, as RLPD",
        "evaluation": ABOUT["evaluation"],
        "criterion": "no online evaluation below the offline policy's success (evaluations_below_offline = 0); "
                     "judged on the evaluation return too (evaluations_below_offline_return = 0), the objective the "
                     "learner maximises",
        "commands": f"TASK={TASK} run.sh 0 1 2 (the three default groups)" + (
                    "; KINDS=wsrl TAG=mix run.sh 0 1 2 -- data.mix_online=true (mix40k: each mix run copied to "
                    "online_wsrl_mix40k_sN and continued with robot-rl finetune resume=<it> train.steps=40000; rlpd40k: "
                    "the rlpd runs the same way with robot-rl train)"
                    if TASK == "push-sparse" else "")
                    if TASK != "reach" else
                    "run.sh 0 1 2; TAG=frozen KINDS='wsrl naive' run.sh 0 1 2 -- offline.freeze_statistics=true; "
                    "KINDS=wsrl TAG=frozen_cw2k run.sh 0 1 2 -- offline.freeze_statistics=true "
                    "train.critic_warmup_updates=2000; KINDS=wsrl TAG=cw2k run.sh 0 1 2 -- "
                    "train.critic_warmup_updates=2000 (and cw5k: 5000); KINDS=wsrl TAG=preserve_cw2k run.sh 0 1 2 -- "
                    "agent.network.obs_norm_preserve=true train.critic_warmup_updates=2000 (and _alr1e-4: agent.optimiser.actor_lr=1e-4) "
                    "(rlpd has no pretraining: its first evaluation is at 1k)",
        "groups": {},
    }
    summary["commands"] = os.environ.get("COMMANDS", summary["commands"])  # another round's own commands
    curves = {}
    for kind in LABELS:
        runs = sorted(r for r in RUNS.glob(f"online_{kind}_s[0-9]*") if r.is_dir() and (r / "metrics.csv").is_file())
        if not runs:
            continue
        seeds = {r.name.rsplit("_s", 1)[1]: per_run(r) for r in runs}
        group = {"runs": [str(RUN_DIR / r.name) for r in runs], "per_seed": seeds}
        for key in ("offline_policy_success", "lowest_online_success", "dip_points", "success_20k", "success_last",
                    "offline_policy_return", "lowest_online_return", "return_dip"):
            if all(key in s for s in seeds.values()):
                group[key] = summarize([s[key] for s in seeds.values()])
        offline_curves = {}
        for r in runs:
            pre = RUNS / f"iql20k_norm_s{r.name.rsplit('_s', 1)[1]}"
            if (pre / "offline_metrics.csv").is_file():
                offline_curves[pre.name] = {int(k): round(100 * v, 1) for k, v in
                                            load_curve(pre, "success_rate", x="offline_step",
                                                                 file="offline_metrics.csv").items()}
                if not FROM_COPIES:
                    copy_run_files(pre, HERE / pre.name, files=("config.yaml", "offline_metrics.csv"),
                                   logs={"output.log": pre.parent / f"{pre.name}.log"})
            if not FROM_COPIES:
                copy_run_files(r, HERE / r.name, logs={"output.log": r.parent / f"{r.name}.log"})
        group["offline_success_curves"] = offline_curves
        summary["groups"][kind] = group
        if kind in PLOTTED:
            curves[LABELS[kind]] = summarize_runs(runs, "success_rate")
        print(kind, {s: (v.get("offline_policy_success"), v["lowest_online_success"], v["success_20k"])
                     for s, v in seeds.items()})
    write_json(summary, HERE / "summary.json")
    plot_curves(curves, HERE / "success.png", title=f"arm:{TASK}, from {DATA}", ylabel="success rate")


if __name__ == "__main__":
    main()
