"""Summary of run.sh's push runs: success at 10k, 20k (and 40k, for runs that go on) env steps per seed and over
seeds (mean, IQM, 95% bootstrap interval) for each (experiment, agent, tag) that has runs, plus the curves with
bands. Copies each run's small files (config, metrics, log; no checkpoints) next to this script."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

from robot_rl.config import load_run_config
from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent
RUNS = Path("runs") / "push_rlpd"  # relative to ROOT, as the summary records them
BC_RUN = Path("runs") / "push_bc_mlp"  # the cloning reference (summary's bc_reference_failure_modes)
LABELS = {"rlpd": "RLPD, 20 demos", "sac": "SAC from scratch"}


@cache
def _demos(gamma: float):  # the same 20 demos for every run: read once
    from robot_rl.prior_data import OfflineData

    return OfflineData.load("data/push_demos", gamma=gamma)


def critic_check(run: Path) -> dict | None:
    """What the run's final critics think of the demos against their true discounted returns (at most 1 here: the
    only reward is the 1 that ends the episode), of the actor's own action in the demo states, and the largest value
    they give the online data; None without its checkpoint. A critic that has diverged values the demos far above
    1; one that extrapolates values the actor's action like the demo's while the actor fails."""
    import torch

    from robot_rl.agents.sac import SAC
    path = run / "checkpoints" / "latest.pt"
    if not path.is_file():
        return None
    state = torch.load(path, weights_only=False, map_location="cpu")
    cfg = load_run_config(run).agent
    demos = _demos(cfg.critic.gamma)
    agent = SAC(demos.obs.shape[1], demos.action.shape[1], cfg)
    agent.load_state_dict(state["agent"])
    online = state["replay"]["obs"]["state"][:, 0], state["replay"]["action"][:, 0]
    with torch.no_grad():
        unscale = 1.0 / float(agent.reward_scale())  # categorical critics value scaled returns
        q_demo = agent.critic(demos.obs, demos.action).min(0).values * unscale
        mode = agent.actor(demos.obs, deterministic=True)[0]
        q_actor = agent.critic(demos.obs, mode).min(0).values * unscale
        q_online = agent.critic(*online).min(0).values * unscale
    return {
        "demo_mc_return_mean": round(float(demos.mc_return.mean()), 3),
        "demo_q_mean": round(float(q_demo.mean()), 3),
        "demo_states_q_of_actor_action_mean": round(float(q_actor.mean()), 3),
        "online_q_max": round(float(q_online.max()), 3),
        "actor_distance_to_demo_actions": round(float((mode - demos.action).norm(dim=1).mean()), 3),
    }


def failure_modes(policy: Path, episodes: int = 50, first_seed: int = 1000,
                  pixel_size: tuple[int, int] | None = None) -> dict | None:
    """How a policy (a run's checkpoint or a `robot-rl bc` policy directory) fails: `episodes` deterministic episodes
    from held-out seeds, each failure put in one class by what the cube did: the hand never came within 5 cm of it
    (`never_reached`), it moved less than 2 cm (`barely_moved`), or it was pushed but ended no closer to the target
    than it started (`pushed_wrong`); the rest got closer without arriving (`short`). `pixel_size`: a camera
    policy's (it then sees `arm:push-sparse-pixels`; the classes are read from the simulator's state either way).
    None where `policy` does not exist."""
    import numpy as np
    from robot_rl.envs.arm.constants import STATE_LAYOUT, TIME_LIMITS
    from robot_rl.envs.arm.tasks import ArmEnv

    from robot_rl.api import Agent

    if not policy.exists():
        return None
    agent = Agent.load(policy)
    env = ArmEnv("push", "sparse", pixels=pixel_size is not None, pixel_size=pixel_size or (84, 84))

    def xy(state: np.ndarray, key: str) -> np.ndarray:
        return state[STATE_LAYOUT[key]][:2]

    counts = dict.fromkeys(("success", "never_reached", "barely_moved", "pushed_wrong", "short"), 0)
    for seed in range(first_seed, first_seed + episodes):
        obs, _ = env.reset(seed=seed)
        agent.reset()
        state = env.privileged_state()
        start_cube, start_gap = xy(state, "cube_pos"), np.linalg.norm(xy(state, "target_rel_cube"))
        closest, done = np.inf, False
        for _ in range(TIME_LIMITS["push"]):
            obs, _, done, _, _ = env.step(agent.predict(obs))
            state = env.privileged_state()
            closest = min(closest, float(np.linalg.norm(state[STATE_LAYOUT["cube_rel_ee"]])))
            if done:
                break
        if done:
            counts["success"] += 1
        elif closest > 0.05:
            counts["never_reached"] += 1
        elif np.linalg.norm(xy(state, "cube_pos") - start_cube) < 0.02:
            counts["barely_moved"] += 1
        elif np.linalg.norm(xy(state, "target_rel_cube")) >= start_gap:
            counts["pushed_wrong"] += 1
        else:
            counts["short"] += 1
    env.close()
    return {"episodes": episodes, "seeds": f"{first_seed}-{first_seed + episodes - 1}", **counts}


def _cached(previous: dict, group: str, key: str, run: Path) -> dict | None:
    """The previous summary's `key` entry for `run`, if its checkpoint has not changed since that summary was
    written (the checks replay 50 episodes per run: minutes for every group)."""
    entry = previous.get("groups", {}).get(group, {}).get(key, {}).get(run.name.rsplit("_s", 1)[1])
    checkpoint = run / "checkpoints" / "latest.pt"
    if entry and checkpoint.is_file() and checkpoint.stat().st_mtime < (HERE / "summary.json").stat().st_mtime:
        return entry
    return None


def main() -> None:
    os.chdir(ROOT)
    groups: dict[str, list[Path]] = {}
    for run in sorted(RUNS.glob("*_s[0-9]*")):
        if run.is_dir() and (run / "metrics.csv").is_file() and load_curve(run, "success_rate"):
            groups.setdefault(run.name.rsplit("_s", 1)[0], []).append(run)
    summary: dict = {
        "task": "arm:push-sparse (sparse reward 1 on success, which ends the episode; 100-step time limit)",
        "demos": "20 scripted expert episodes (robot-rl collect ... policy=expert episodes=20, seed 0)",
        "steps": "20k env steps = agent steps (action repeat 1), 1 env; the 40k group goes on to 40k",
        "evaluation": "every 2k env steps, 20 episodes (one per eval env), deterministic actor",
        "groups": {},
    }
    previous = json.loads((HERE / "summary.json").read_text()) if (HERE / "summary.json").is_file() else {}
    curves = {}
    for name, runs in groups.items():
        kind, agent, *tag = name.split("_", 2)  # run.sh's names: KIND_AGENT[_TAG]_sSEED
        at = {}
        for step in (10_000, 20_000, 40_000):
            per_seed = {}
            for run in runs:
                curve = load_curve(run, "success_rate")
                if step in curve:
                    per_seed[run.name.rsplit("_s", 1)[1]] = round(100 * curve[step], 1)
            at[step] = per_seed
        summary["groups"][name] = {
            "experiment": f"{kind}_push", "agent": agent, "tag": tag[0] if tag else None,
            "success_percent_10k": at[10_000], "success_percent_20k": at[20_000],
            "summary_10k": summarize(list(at[10_000].values())) if at[10_000] else None,
            "summary_20k": summarize(list(at[20_000].values())) if at[20_000] else None,
            **({"success_percent_40k": at[40_000], "summary_40k": summarize(list(at[40_000].values()))}
               if at[40_000] else {}),
        }
        cfg = load_run_config(runs[0])  # the label from the runs' settings, not the tag
        opt = cfg.agent.optimiser
        label = f"agent={agent}, gamma {cfg.agent.critic.gamma:g}" + (f", UTD {opt.utd}" if opt.utd != 1 else "")
        if cfg.data.path and cfg.data.mirror:
            label += ", mirrored demos" + (" and online data" if cfg.train.mirror_online else "")
        label += ", to 40k" if tag and tag[0] == "40k" else ""
        curves[f"{LABELS[kind]} ({label})"] = summarize_runs(runs, "success_rate")
        for run in runs:
            copy_run_files(run, HERE / run.name, logs={"output.log": run.parent / f"{run.name}.log"})
        for key, check in (("critic_check", critic_check),
                           ("failure_modes", lambda r: failure_modes(r / "checkpoints" / "latest.pt"))):
            summary["groups"][name][key] = {
                run.name.rsplit("_s", 1)[1]: _cached(previous, name, key, run) or check(run) for run in runs
            }
        print(name, "20k:", at[20_000], summary["groups"][name]["summary_20k"])
    summary["bc_reference_failure_modes"] = {  # what cloning the same demos gets wrong, for comparison
        "command": f"robot-rl bc dataset=data/push_demos policy=mlp steps=3000 run_dir={BC_RUN}",
        **(failure_modes(ROOT / BC_RUN / "policy") or {"missing": "run the command first"}),
    }
    write_json(summary, HERE / "summary.json")
    plot_curves(curves, HERE / "success.png", title="arm:push-sparse", ylabel="success rate")


if __name__ == "__main__":
    main()
