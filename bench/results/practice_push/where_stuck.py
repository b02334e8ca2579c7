"""Where is the cube when practice needs a person? A run's latest policy, stochastic (as it acts while it learns),
practising arm:push-sparse (env seed 321) for N episodes; each human reset's cube position (after the reset
controller ran), sorted by where it lies. The policy behind the figures in docs/arm.md (practice scene): an
8k-step RLPD practice run, made with

    robot-rl train experiment=rlpd_push env.practice=true seed=7 threads=1 train.steps=8000 run_dir=runs/diag/practice_s7
    python bench/results/practice_push/where_stuck.py runs/diag/practice_s7 200

One policy, one env seed: an anecdote that says where the resets come from, not how many a run needs.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch
from robot_rl.envs.arm.constants import PRACTICE_XY_BOX, WORKSPACE_HIGH, WORKSPACE_LOW
from robot_rl.envs.sim.tasks.arm import ArmTask

from robot_rl import checkpoint, envs
from robot_rl.config import load_run_config
from robot_rl.trainer import build_agent, make_env


def where(cube: torch.Tensor) -> str:
    x, y, z = (float(v) for v in cube)
    if z < 0.01:
        return "off the table"
    if x < WORKSPACE_LOW[0] - 0.01:
        return "near the robot's base"
    if x > WORKSPACE_HIGH[0]:
        return "beyond the far reach"
    if abs(y) > WORKSPACE_HIGH[1]:
        return "beyond the sides"
    (lx, ly), (hx, hy) = PRACTICE_XY_BOX
    return "within reach, outside the pushable box" if not (lx <= x <= hx and ly <= y <= hy) else "other"


def main(run: Path, episodes: int) -> None:
    torch.set_num_threads(1)
    stuck: list[torch.Tensor] = []
    practice_state = ArmTask.practice_state

    def spy(self: ArmTask, rng, qpos, qvel):  # noqa: ANN001, ANN202  the task's own method, watched
        out = practice_state(self, rng, qpos, qvel)
        if bool(out[3][0]):
            stuck.append(self.cube_position(qpos)[0].clone())
        return out

    ArmTask.practice_state = spy
    cfg = load_run_config(run)
    with make_env(cfg, 1) as plain:
        agent = build_agent(cfg, plain)
    agent.load_state_dict(checkpoint.load(run / "checkpoints" / "latest.pt")["agent"])
    env = envs.make("arm:push-sparse", num_envs=1, seed=321, practice=True)
    obs, done, successes = env.reset(), 0, 0
    while done < episodes:
        obs, _, terminated, truncated, _ = env.step(agent.act(obs))
        if bool((terminated | truncated)[0]):
            done, successes = done + 1, successes + int(terminated[0])
    env.close()
    print(f"{run}: {episodes} practice episodes, {successes} solved, {len(stuck)} human resets")
    for place, n in Counter(where(c) for c in stuck).most_common():
        print(f"  {n:3d} {place}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 200)
