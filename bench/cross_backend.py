"""How closely MJX and MuJoCo Warp follow CPU MuJoCo on the same task with the same actions.

    python -m bench.cross_backend [--steps 100] [--num-envs 2] [--tasks ...] [--out PATH]

Each task is rolled out with one seed and one stream of uniform random actions on CPU MuJoCo (float64), MJX and
Warp (float32; here both on the CPU), and the largest absolute difference of any observation entry from CPU
MuJoCo is recorded per step. The summary gives it over the first 3 steps (contact settling), over the rest up to
``--steps``, and the first step where it exceeds 1e-2 (where chaotic contact events separate the trajectories,
if they do). Written to ``bench/results/<date>-cross-backend.json``; docs/gpu.md quotes it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

import torch
from robot_rl.envs.sim import SimEnv, make_task

from bench.envs_throughput import machine_info

TASKS = ("cartpole-swingup", "Hopper-v5", "reach", "push")


def rollout(task: str, physics: str, steps: int, num_envs: int) -> torch.Tensor:
    """Observations (true last ones at episode ends) ``[steps + 1, N, D]`` under seeded random actions."""
    env = SimEnv(make_task(task), physics, num_envs, seed=0)
    gen = torch.Generator().manual_seed(1)
    observations = [env.reset()["state"]]
    try:
        for _ in range(steps):
            action = torch.rand(num_envs, env.action_dim, generator=gen) * 2 - 1
            _, _, _, _, info = env.step(action)
            observations.append(info["final_obs"]["state"])
    finally:
        env.close()
    return torch.stack(observations)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--num-envs", type=int, default=2)
    parser.add_argument("--tasks", nargs="+", default=list(TASKS))
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = []
    for task in args.tasks:
        ref = rollout(task, "cpu", args.steps, args.num_envs)
        for physics in ("mjx", "warp"):
            start = time.perf_counter()
            obs = rollout(task, physics, args.steps, args.num_envs)
            err = (obs - ref).abs().amax(dim=(1, 2))
            above = torch.nonzero(err > 1e-2).flatten().tolist()
            row = {
                "task": task,
                "backend": physics,
                "max_error_first_3_steps": float(err[:3].max()),
                "max_error_after": float(err[3:].max()),
                "first_step_error_above_1e-2": above[0] if above else None,
                "error_per_step": err.tolist(),
                "seconds_with_compile": round(time.perf_counter() - start, 1),
            }
            rows.append(row)
            print(
                f"{task:18s} {physics:5s} first 3 steps {row['max_error_first_3_steps']:.1e}  "
                f"after {row['max_error_after']:.1e}  first > 1e-2 at step {row['first_step_error_above_1e-2']}",
                flush=True,
            )
    result = {"machine": machine_info(), "steps": args.steps, "num_envs": args.num_envs, "rows": rows}
    out = args.out or Path(__file__).parent / "results" / f"{datetime.date.today()}-cross-backend.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    return result


if __name__ == "__main__":
    main()
