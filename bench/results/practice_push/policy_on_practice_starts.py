"""Does practice start where the resets start? A policy trained with a reset every episode (a run of run.sh's reset
mode), deterministic, on 60 episodes from the task's own resets and 60 from practice's starts (practice=True: the
reset controller, the arm home, the cube at rest), arm:push-sparse, env seed 123. With ``--raw-quat`` the cube's
orientation is observed as its raw quaternion, as before it was observed up to the cube's symmetry: what made
practice starts unlike any reset (1 seed, an anecdote; practice_starts.txt has the output).

    python bench/results/practice_push/policy_on_practice_starts.py runs/practice_push/reset_rawquat_s0 [--raw-quat]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from robot_rl import checkpoint, envs
from robot_rl.config import load_run_config
from robot_rl.trainer import build_agent, make_env


def main(run: Path, raw_quat: bool, episodes: int = 60) -> None:
    torch.set_num_threads(1)
    if raw_quat:
        import robot_rl.envs.sim.tasks.arm as arm

        arm.canonical_cube_quat = lambda q: q  # noqa: E731  the observation before the symmetry
    cfg = load_run_config(run)
    with make_env(cfg, 1) as plain:
        agent = build_agent(cfg, plain)
    agent.load_state_dict(checkpoint.load(run / "checkpoints" / "latest.pt")["agent"])
    for practice in (False, True):
        env = envs.make("arm:push-sparse", num_envs=1, seed=123, practice=practice)
        obs, done, successes = env.reset(), 0, 0
        while done < episodes:
            obs, _, terminated, truncated, _ = env.step(agent.act(obs, deterministic=True))
            if bool((terminated | truncated)[0]):
                done, successes = done + 1, successes + int(terminated[0])
        env.close()
        print(f"{run.name} {'raw quaternion' if raw_quat else 'up to symmetry'}: "
              f"{'practice starts' if practice else 'reset starts'} {successes}/{episodes}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), "--raw-quat" in sys.argv[2:])
