"""The simulated person (teleop=person) alone on the arm tasks, in process (no bridge, no learning).

Three roles per task and seed, 30 episodes each, the task's time limit, env seeds 1000*seed + episode:
demonstrator (mode=always), and corrector (mode=takeover) of a policy that does nothing and of a uniformly random
policy. Success is the env's own (sparse reward, episodes go on past success until the person presses SUCCESS or
the time limit). Usage: python measure.py [out.json]  (about a minute on one core)
"""

import json
import sys

import numpy as np
import torch
from robot_rl.envs.arm.constants import TIME_LIMITS
from robot_rl.envs.arm.tasks import ArmEnv
from robot_rl.real.teleop.base import Event
from robot_rl.real.teleop.person import SimulatedPerson

torch.set_num_threads(1)
POLICIES = {"demonstrator": ("always", lambda o, r: np.zeros(4, np.float32)),
            "corrects a policy that does nothing": ("takeover", lambda o, r: np.zeros(4, np.float32)),
            "corrects a random policy": ("takeover", lambda o, r: r.uniform(-1, 1, 4).astype(np.float32))}


def run(task: str, mode: str, policy, seed: int, episodes: int = 30) -> dict:
    env = ArmEnv(task, "sparse", end_on_success=False)
    person, rng, solved = SimulatedPerson(task, mode=mode, seed=seed), np.random.default_rng(seed), 0
    for ep in range(episodes):
        obs, _ = env.reset(seed=1000 * seed + ep)
        person.reset()
        ok = False
        for _ in range(TIME_LIMITS[task]):
            cmd = person.read(obs)
            obs, _, _, _, info = env.step(cmd.action if cmd.active else policy(obs, rng))
            ok = ok or bool(info["success"])
            if Event.SUCCESS in cmd.events:
                break
        solved += ok
    return {"success": solved / episodes, **person.report()}


if __name__ == "__main__":
    out = {}
    for task in ("push", "pick_place"):
        for role, (mode, policy) in POLICIES.items():
            runs = [run(task, mode, policy, seed) for seed in (0, 1, 2)]
            out[f"{task}: {role}"] = {k: [r[k] for r in runs] for k in runs[0]}
            row = out[f"{task}: {role}"]
            print(f"{task}: {role}: success {np.mean(row['success']):.0%} {row['success']} | interventions "
                  f"{np.mean(row['intervention_rate']):.0%} | take-overs/episode {np.mean(row['takeovers_per_episode']):.2f}"
                  f" | operator minutes per 30 episodes {np.mean(row['operator_minutes']):.2f}", flush=True)
    json.dump(out, open(sys.argv[1] if len(sys.argv) > 1 else "measure.json", "w"), indent=1)
