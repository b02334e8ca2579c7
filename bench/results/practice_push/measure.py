"""How often a person would have to reset the push scene in autonomous practice (``practice=True``), for policies
from a learner's first steps (uniform random actions) to the scripted expert, 20,000 control steps each (16.7 min of
robot time at 20 Hz), one env, seeds 0-2: episodes, successes and human resets (the cube pushed out of
``PRACTICE_XY_BOX`` or off the table). Writes measure.json beside this file.

    MUJOCO_GL=egl python bench/results/practice_push/measure.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch
from robot_rl.envs.arm import make_expert

from robot_rl import envs

STEPS = 20_000
POLICIES = {"uniform random": None, "expert, noise 1.0": 1.0, "expert, noise 0.3": 0.3}


def run(policy: str, noise: float | None, seed: int) -> dict:
    env = envs.make("arm:push-sparse", num_envs=1, seed=seed, practice=True)
    expert = None if noise is None else make_expert("arm:push", 1, noise=noise, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    obs = env.reset()
    episodes = successes = humans = 0
    t0 = time.perf_counter()
    for _ in range(STEPS):
        action = torch.rand(1, 4, generator=gen) * 2 - 1 if expert is None else expert.act(obs)
        obs, _, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        if expert is not None:
            expert.reset(done)
        episodes += int(done.sum())
        successes += int(terminated.sum())
        humans += int(info["human_reset"].sum()) if "human_reset" in info else 0
    env.close()
    return {"policy": policy, "seed": seed, "steps": STEPS, "episodes": episodes, "successes": successes,
            "human_resets": humans, "human_resets_per_100_episodes": 100 * humans / max(episodes, 1),
            "wall_s": round(time.perf_counter() - t0, 1)}


def main() -> None:
    """Rows already in measure.json are kept (a stopped run goes on where it stopped); each new one is written as it
    comes."""
    torch.set_num_threads(1)
    out = Path(__file__).with_name("measure.json")
    rows = json.loads(out.read_text())["rows"] if out.is_file() else []
    for policy, noise in POLICIES.items():
        for seed in range(3):
            if any(r["policy"] == policy and r["seed"] == seed for r in rows):
                continue
            rows.append(run(policy, noise, seed))
            print(rows[-1], flush=True)
            out.write_text(json.dumps({"task": "arm:push-sparse, practice=True", "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
