"""Summary of run.sh's hil-train runs on the simulated arm's sparse push: per seed, the intervention rate and the
autonomous success (successful episodes without any takeover) over the first and the last 2,000 training steps,
and deploy's success on autonomous episodes of the run's best weights (50 in run.sh, 20 in ../hil_pixels/run.sh); over seeds: mean, IQM, 95% bootstrap
interval. Copies each run's small files (config, metrics, per-episode log, console logs) next to this script.

Usage: summarize.py [RUNS [OUT]]: the runs of `OUT=RUNS run.sh ...` (default runs/hil_push), summarised into OUT, a
folder beside this script (default: this folder), e.g. `summarize.py runs/hil_push_g95 gamma0.95`; the camera runs of
../hil_pixels/run.sh: `summarize.py runs/hil_pixels ../hil_pixels/person`."""

from __future__ import annotations

import csv
import os
import re
import sys
from pathlib import Path

from robot_rl.stats import RUN_FILES, copy_run_files, summarize, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
RUNS = Path(sys.argv[1] if len(sys.argv) > 1 else "runs/hil_push")  # relative to ROOT, as the summary records them
OUT = HERE / sys.argv[2] if len(sys.argv) > 2 else HERE
WINDOW = 2000  # env steps


def window_means(rows: list[dict], first: bool) -> dict[str, float]:
    """Step-weighted intervention rate and the autonomous success rate of the episodes in the first or last window."""
    end = int(rows[-1]["env_steps"])
    chosen = [r for r in rows if (int(r["env_steps"]) <= WINDOW if first else int(r["env_steps"]) > end - WINDOW)]
    steps = sum(int(r["length"]) for r in chosen)
    return {
        "episodes": len(chosen),
        "intervention_rate": round(sum(int(r["interventions"]) for r in chosen) / steps, 3),
        # the human side as a person feels it: how often they take over (runs from before the column: None)
        "takeovers_per_episode": round(sum(int(r["takeovers"]) for r in chosen) / len(chosen), 2)
        if "takeovers" in chosen[0] else None,
        "autonomous_success": round(sum(r["success"] == "True" and int(r["interventions"]) == 0 for r in chosen)
                                    / len(chosen), 3),
    }


def plot(runs: list[Path]) -> None:
    """Each seed's intervention rate over the last 20 episodes against env steps (the seeds' episodes end at
    different steps, so there is no shared x for a band)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for run in runs:
        rows = list(csv.DictReader(open(run / "hil_metrics.csv")))
        x, y = [], []
        for i in range(19, len(rows)):
            last = rows[i - 19 : i + 1]
            x.append(int(rows[i]["env_steps"]))
            y.append(sum(int(r["interventions"]) for r in last) / sum(int(r["length"]) for r in last))
        ax.plot(x, y, label=f"seed {run.name[1:]}")
    config = settings(runs[0]) if runs else {}
    ax.set(xlabel="env steps", ylabel="intervention rate (last 20 episodes)", ylim=(0, 1),
           title=f"hil-train, sparse push (sim arm{', cameras' if config.get('pixels') else ''}, "
                 f"{config.get('teleop') or 'no'} operator)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(OUT / "intervention_rate.png", dpi=120)
    plt.close(fig)


def settings(run: Path) -> dict:
    """The settings the run's group varies (its config.yaml): the discount, the mirror images, the intervention
    penalty, the updates per transition (keys a run from before they existed lacks are their defaults)."""
    import yaml

    config = yaml.safe_load((run / "config.yaml").read_text())
    agent = config["agent"]  # grouped since 2026-12 (agent.critic.gamma); flat before (agent.gamma)
    return {"agent_gamma": float(agent.get("critic", agent).get("gamma")),
            "agent_utd": int(agent.get("optimiser", agent).get("utd")), "pixels": bool(config.get("pixels")),
            **{k: config.get(k, default) for k, default in
               (("mirror_demos", False), ("mirror_online", False), ("intervention_penalty", 0.0),
                ("teleop", "scripted"), ("distributed", False))},
            "updates_per_transition": float(config.get("updates_per_transition", 1.0)), "demos_path": config.get("demos")}


def describe(config: dict) -> dict[str, str]:
    """What ran: the operator, and the demos (recorded over the bridge by run.sh, or a dataset given as DEMOS=)."""
    bridge = config.get("demos_path") is None or "/demos_s" in str(config["demos_path"])
    operators = {"scripted": "teleop=scripted: the arm's scripted expert takes over when the policy stops making "
                             "progress (the ideal operator)",
                 "person": "teleop=person: the simulated person (real/teleop/person.py: reaction delay, noisy and "
                           "drifting corrections, takes over on a stall or a failing approach, hands back)"}
    return {
        "operator": operators.get(config.get("teleop"), "none (teleop=null): the policy acts alone"),
        "observations": "front + wrist cameras and proprioception (the scene's state only to the simulated operator)"
                        if config.get("pixels") else "the full 29-number state",
        "demos": (f"20 episodes of teleop={config.get('teleop')} recorded over the bridge first" if bridge
                  else f"{config['demos_path']}: 20 episodes of the simulator's scripted expert (robot-rl collect "
                       "env.spec=arm:push-sparse policy=expert episodes=20)") + ", in the prior buffer with every "
                 "intervention",
        "learner": "on Ray (distributed=true)" if config.get("distributed") else "in the actor's process",
    }


def main() -> None:
    os.chdir(ROOT)
    per_seed, runs = {}, []
    for run in sorted(RUNS.glob("s[0-9]*")):
        deploy = run.parent / f"deploy_{run.name}.log"
        if not (run / "hil_metrics.csv").is_file() or not deploy.is_file():
            continue
        done = re.search(r"success (\d+)/(\d+)", deploy.read_text())
        if done is None:
            continue
        rows = list(csv.DictReader(open(run / "hil_metrics.csv")))
        per_seed[run.name[1:]] = {
            "env_steps": int(rows[-1]["env_steps"]), "first_2k": window_means(rows, True),
            "last_2k": window_means(rows, False),
            "deploy_success_percent": round(100 * int(done.group(1)) / int(done.group(2)), 1),
            # minutes the operator drove over the whole run, at run.sh's 20 Hz (the person's time at the device)
            "operator_minutes": round(sum(int(r["interventions"]) for r in rows) / 20 / 60, 2),
            # ticks the robot held because no command came in time (a loaded host); older runs did not log them
            "missed_ticks_percent": round(100 * sum(int(r.get("missed_ticks") or 0) for r in rows)
                                          / int(rows[-1]["env_steps"]), 2),
        }
        runs.append(run)
        copy_run_files(run, OUT / run.name, (*RUN_FILES, "hil_metrics.csv"),
                       logs={"hil-train.log": run.parent / f"{run.name}.log",
                             "deploy.log": run.parent / f"deploy_{run.name}.log",
                             "demos.log": run.parent / f"demos_{run.name}.log"})
    values = lambda key, sub: [s[key][sub] for s in per_seed.values()]  # noqa: E731
    summary = {
        "task": "sim_arm push, sparse reward (1 on success, which ends the episode), served by serve-robot at 20 Hz",
        **(describe(settings(runs[0])) if runs else {}),
        "agent": "hil-train's default (plain SAC, LayerNorm MLPs, 2 critics) with the settings below; "
                 "updates_per_transition updates per transition, each with agent_utd critic steps",
        **(settings(runs[0]) if runs else {}),
        "steps": f"{per_seed[next(iter(per_seed))]['env_steps'] if per_seed else 0:,} env steps (= agent steps, action "
                 "repeat 1; the last episode may run past the run's steps)",
        "evaluation": "training episodes (no separate evaluation on a robot); deploy: the episodes of deploy.log, "
                      "the run's best.pt (else latest.pt), deterministic, no operator",
        "per_seed": per_seed,
        "intervention_rate_last_2k": summarize(values("last_2k", "intervention_rate")),
        "autonomous_success_last_2k": summarize(values("last_2k", "autonomous_success")),
        "deploy_success_percent": summarize([s["deploy_success_percent"] for s in per_seed.values()]),
    }
    write_json(summary, OUT / "summary.json")
    plot(runs)
    for k in ("intervention_rate_last_2k", "autonomous_success_last_2k", "deploy_success_percent"):
        print(k, summary[k]["values"], round(summary[k]["mean"], 3))


if __name__ == "__main__":
    main()
