"""Environment throughput: env steps/s of batched HalfCheetah-v5 against gymnasium's SyncVectorEnv.

    python -m bench.envs_throughput [--quick] [--out results.json] [--num-envs 1 8 64] [--nthread K]

Implementations, all with random actions (pre-drawn, so drawing them is not timed) and autoreset included:
  sync       gymnasium.vector.SyncVectorEnv over gymnasium.make(task), numpy actions (the reference)
  gym        envs.make("gym:<task>", n): our SyncBatchedEnv, torch in and out
  mujoco     envs.make("mujoco:<task>", n): envs.sim's task on CPU MuJoCo, all envs stepped as one
             mujoco.batch on its thread pool (--nthread threads, default os.cpu_count())
  mujoco-1t  the same with one physics thread, to show what the threads add on this machine
A round gives every implementation --seconds of stepping, cut into --slices short slices taken in turn, so
that load from other processes, which drifts within seconds, hits all implementations alike. Reported per
implementation: the median over rounds of its steps/s and of its within-round ratio to SyncVectorEnv.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import mujoco
import numpy as np
import torch
from robot_rl.envs.mujoco_backend import GymnasiumTwinEnv

from bench.common import cpu_model
from robot_rl import envs

IMPLS = ("sync", "gym", "mujoco", "mujoco-1t")
ACTION_POOL = 64  # distinct pre-drawn action batches, cycled through


def _load() -> list[float] | None:
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


def machine_info() -> dict[str, Any]:
    """What the figures were measured on; the load average says how busy the machine was."""
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cores": usable,
        "load_average": _load(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "mujoco": mujoco.__version__,
        "gymnasium": gym.__version__,
        "numpy": np.__version__,
    }


class Stepper:
    """One implementation at one batch size: a step function that cycles through its actions, and cleanup."""

    def __init__(self, name: str, num_envs: int, step: Callable[[], None], close: Callable[[], None]) -> None:
        self.name, self.num_envs, self.step, self.close = name, num_envs, step, close


def _cycle(pool: Sequence[Any], fn: Callable[[Any], Any]) -> Callable[[], None]:
    index = 0

    def step() -> None:
        nonlocal index
        fn(pool[index])
        index = (index + 1) % len(pool)

    return step


def build(impl: str, task: str, num_envs: int, nthread: int, seed: int) -> Stepper:
    """Construct (untimed) one implementation, reset it, and pre-draw its actions."""
    rng = np.random.default_rng(seed)
    if impl == "sync":
        vec = gym.vector.SyncVectorEnv([lambda: gym.make(task) for _ in range(num_envs)])
        vec.reset(seed=seed)
        space = vec.action_space
        pool = [rng.uniform(space.low, space.high).astype(np.float32) for _ in range(ACTION_POOL)]
        return Stepper(impl, num_envs, _cycle(pool, vec.step), vec.close)
    if impl == "gym":
        env: envs.BatchedEnv = envs.make(f"gym:{task}", num_envs, seed=seed)
    elif impl == "mujoco":
        if nthread == (os.cpu_count() or 1):  # the public path, whose default is os.cpu_count() threads
            env = envs.make(f"mujoco:{task}", num_envs, seed=seed)
        else:
            env = GymnasiumTwinEnv(task, num_envs, seed=seed, nthread=min(nthread, num_envs))
    elif impl == "mujoco-1t":
        env = GymnasiumTwinEnv(task, num_envs, seed=seed, nthread=1)
    else:
        raise ValueError(f"unknown implementation {impl!r}")
    env.reset()
    draws = rng.uniform(-1.0, 1.0, (ACTION_POOL, num_envs, env.action_dim)).astype(np.float32)
    return Stepper(impl, num_envs, _cycle(list(torch.from_numpy(draws)), env.step), env.close)


def timed_steps(stepper: Stepper, seconds: float) -> tuple[int, float]:
    """Step for at least ``seconds``; returns (batch steps, wall seconds)."""
    steps = 0
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        # Read the clock every few steps only, so that reading it costs nothing measurable at 1 env.
        for _ in range(8):
            stepper.step()
        steps += 8
        now = time.perf_counter()
        if now >= deadline:
            return steps, now - start


def measure_round(
    steppers: Sequence[Stepper], seconds: float, slices: int, warmup_steps: int
) -> dict[str, float]:
    """Env steps/s of each implementation over ``seconds`` each, in ``slices`` interleaved slices."""
    for s in steppers:
        for _ in range(warmup_steps):
            s.step()
    steps = {s.name: 0 for s in steppers}
    wall = {s.name: 0.0 for s in steppers}
    for _ in range(slices):
        for s in steppers:
            k, dt = timed_steps(s, seconds / slices)
            steps[s.name] += k
            wall[s.name] += dt
    return {s.name: steps[s.name] * s.num_envs / wall[s.name] for s in steppers}


def run(
    task: str,
    num_envs: Sequence[int],
    impls: Sequence[str],
    rounds: int,
    seconds: float,
    slices: int,
    warmup_steps: int,
    nthread: int,
    seed: int = 0,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Every figure: per batch size and implementation, steps/s and ratio to SyncVectorEnv of each round."""
    results = []
    for n in num_envs:
        steppers = [build(impl, task, n, nthread, seed) for impl in impls]
        per_round: dict[str, list[float]] = {s.name: [] for s in steppers}
        load: list[float | None] = []
        try:
            for r in range(rounds):
                order = steppers[r % len(steppers) :] + steppers[: r % len(steppers)]
                for name, value in measure_round(order, seconds, slices, warmup_steps).items():
                    per_round[name].append(value)
                now = _load()
                load.append(None if now is None else now[0])
                log(
                    f"  num_envs={n} round {r + 1}/{rounds}: "
                    + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in per_round.items())
                )
        finally:
            for s in steppers:
                s.close()
        sync = per_round.get("sync")
        for name, values in per_round.items():
            # Ratios are taken within a round (same load), then the median over rounds.
            ratios = None if sync is None else [v / b for v, b in zip(values, sync, strict=True)]
            results.append(
                {
                    "num_envs": n,
                    "impl": name,
                    "steps_per_s_rounds": values,
                    "steps_per_s_median": statistics.median(values),
                    "ratio_to_sync_rounds": ratios,
                    "ratio_to_sync": None if ratios is None else statistics.median(ratios),
                    "load_average_1min_rounds": load,
                }
            )
    return results


def markdown_table(results: Sequence[dict[str, Any]], impls: Sequence[str]) -> str:
    """One row per batch size: median env steps/s of each implementation (median ratio to SyncVectorEnv)."""
    lines = ["| num_envs | " + " | ".join(impls) + " |", "|---:|" + "---:|" * len(impls)]
    for n in sorted({r["num_envs"] for r in results}):
        cells = []
        for impl in impls:
            row = next(r for r in results if r["num_envs"] == n and r["impl"] == impl)
            ratio = row["ratio_to_sync"]
            suffix = "" if ratio is None or impl == "sync" else f" ({ratio:.2f}x)"
            cells.append(f"{row['steps_per_s_median']:,.0f}{suffix}")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="short measurements (indicative only)")
    p.add_argument("--out", type=Path, default=None, help="write machine info, config, every figure as JSON")
    p.add_argument("--task", default="HalfCheetah-v5")
    p.add_argument("--num-envs", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--impls", nargs="+", default=list(IMPLS), choices=IMPLS)
    p.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    p.add_argument("--seconds", type=float, default=None, help="per impl and round; default 2 (0.4 quick)")
    p.add_argument("--slices", type=int, default=8, help="interleaved slices a round's seconds are cut into")
    p.add_argument("--nthread", type=int, default=os.cpu_count() or 1, help="physics threads of mujoco:")
    args = p.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 3)
    seconds = args.seconds or (0.4 if args.quick else 2.0)
    warmup_steps = 10 if args.quick else 50
    config = {
        "task": args.task,
        "num_envs": args.num_envs,
        "impls": args.impls,
        "rounds": rounds,
        "seconds_per_impl_and_round": seconds,
        "slices_per_round": args.slices,
        "warmup_steps": warmup_steps,
        "nthread": args.nthread,
        "quick": args.quick,
        "unit": "env steps/s = batch steps x num_envs / wall seconds",
        "ratio": "median over rounds of (impl steps/s / sync steps/s) within the round",
    }
    machine = machine_info()
    print(
        f"# {args.task} env steps/s; {machine['cpu_model']}, {machine['cpu_count']} CPUs, "
        f"load average {machine['load_average']}",
        flush=True,
    )
    results = run(
        args.task,
        args.num_envs,
        args.impls,
        rounds,
        seconds,
        args.slices,
        warmup_steps,
        args.nthread,
        log=lambda s: print(s, file=sys.stderr, flush=True),
    )
    machine["load_average_after"] = _load()
    table = markdown_table(results, args.impls)
    print(table)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        payload = {"machine": machine, "config": config, "results": results, "table": table}
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
