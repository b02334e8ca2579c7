"""Simulator backends: env steps/s of mujoco:, mjx: and warp: tasks against a CPU peer, compile time apart.

    python -m bench.sim_backends [--quick] [--device cpu|cuda] [--num-envs N ...] [--tasks T ...]
                                 [--backends mujoco mjx warp] [--seconds S] [--rounds R] [--out PATH]

Implementations, all with random actions in [-1, 1] pre-drawn on the env's device (drawing is not timed) and
autoreset included (Hopper falls within tens of random steps, so resets are part of every timed window):
  peer        the reference a user has without these backends, at min(N, --peer-max-envs) envs (stepping N
              single envs one after another is linear in N, so its steps/s at 64 envs stands for larger N):
              gymnasium.vector.SyncVectorEnv over gymnasium.make(task) for the locomotion tasks (Hopper-v5),
              our SyncBatchedEnv over dm_control for cartpole-swingup (envs.make("dmc:cartpole-swingup")) and
              over the tabletop arm for reach/push (envs.make("arm:reach"))
  mujoco      envs.make("mujoco:<task>", N, device): envs.sim.SimEnv on CPU MuJoCo (for Hopper-v5 with
              gymnasium's reset noise, envs.mujoco_backend.GymnasiumTwinEnv). Result files before 2026-11-25
              also have mujoco-sim, SimEnv for Hopper-v5 when mujoco:Hopper-v5 was a numpy implementation
  mjx         envs.make("mjx:<task>", N, device): MJX under jit(vmap) (JAX's CPU backend on --device cpu)
  warp        envs.make("warp:<task>", N, device): MuJoCo Warp (its LLVM CPU backend on --device cpu)

Compilation is kept off the clock: every implementation is made, reset and stepped --warmup-steps times before
any timing (MJX compiles its step for each N on the first call, Warp compiles its kernels once per process);
how long that took is recorded apart (`setup`: make, reset, first step, the other warm-up steps), because users
pay it too. MJX keeps compiled steps on disk (envs.sim.mjx_physics), so a second run is faster: the number of
entries in that cache before and after each build says whether it compiled or loaded.

A round gives every implementation --seconds of stepping, cut into --slices slices taken in turn, so that load
from other processes, which drifts within seconds, hits all of them alike; ratios to the peer are taken within
a round, then the median over rounds. On CUDA the device is synchronised at both ends of every timed slice.
With --device cuda on a machine without CUDA, the result file is written with every row marked not measured
(exit status 0).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from robot_rl.envs.sim import task_names

from bench.common import _git, _version, machine_info, results_path, sync, write_json
from bench.envs_throughput import ACTION_POOL, Stepper, _cycle, _load
from bench.envs_throughput import build as build_gym_stepper
from robot_rl import envs

BACKENDS = ("mujoco", "mjx", "warp")
DEFAULT_TASKS = ("cartpole-swingup", "Hopper-v5", "reach", "push")
LOCOMOTION = ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5")  # gymnasium's own envs are the peer
NOT_ON_THIS_DEVICE = "no CUDA device in this run"
EXTRA_VERSIONS = ("jax", "jaxlib", "mujoco-mjx", "warp-lang", "mujoco-warp")


def peer_spec(task: str) -> str:
    """What the peer of ``task`` is, in words for the result file."""
    if task in LOCOMOTION:
        return f"gymnasium SyncVectorEnv(gymnasium.make({task!r}))"
    base = task.removesuffix("-sparse")
    return (
        "dmc:cartpole-swingup SyncBatchedEnv" if base == "cartpole-swingup" else f"arm:{task} SyncBatchedEnv"
    )


def make_env(task: str, impl: str, num_envs: int, device: str, seed: int) -> envs.BatchedEnv:
    """The env of one implementation (the peer's locomotion form is built by bench.envs_throughput)."""
    if impl == "peer":
        spec = "dmc:cartpole-swingup" if task == "cartpole-swingup" else f"arm:{task}"
        return envs.make(spec, num_envs, device=device, seed=seed)
    prefix = {"mujoco": "mujoco", "mjx": "mjx", "warp": "warp"}[impl]
    return envs.make(f"{prefix}:{task}", num_envs, device=device, seed=seed)


def _jax_cache_entries() -> int | None:
    """Files in JAX's compilation cache (envs.sim.mjx_physics sets one up unless the user chose their own):
    growth during a build means MJX compiled rather than loaded."""
    try:
        import jax
    except ImportError:
        return None
    cache = jax.config.jax_compilation_cache_dir
    try:
        return len(os.listdir(cache)) if cache else None
    except OSError:
        return 0


def build(
    task: str, impl: str, num_envs: int, device: str, seed: int, warmup_steps: int
) -> tuple[Stepper, dict[str, Any]]:
    """Make, reset and warm up one implementation; returns its stepper and how long each setup stage took.

    The first step is timed on its own: it is where MJX compiles its step and Warp its kernels (each stage
    is synchronised on CUDA, so queued work is not billed to the next stage).
    """
    cache_before = _jax_cache_entries() if impl == "mjx" else None
    t0 = time.perf_counter()
    if impl == "peer" and task in LOCOMOTION:
        stepper = build_gym_stepper("sync", task, num_envs, nthread=1, seed=seed)  # makes and resets
        stepper.name = "peer"
        t_made = t_reset = time.perf_counter()
    else:
        env = make_env(task, impl, num_envs, device, seed)
        sync(device)
        t_made = time.perf_counter()
        try:
            env.reset()
            sync(device)
            t_reset = time.perf_counter()
            gen = torch.Generator(device=device).manual_seed(seed)
            draws = torch.rand(ACTION_POOL, num_envs, env.action_dim, generator=gen, device=device) * 2 - 1
        except BaseException:
            env.close()
            raise
        stepper = Stepper(impl, num_envs, _cycle(list(draws.unbind(0)), env.step), env.close)
    step_s = []
    try:
        for _ in range(warmup_steps):
            t = time.perf_counter()
            stepper.step()
            sync(device)
            step_s.append(time.perf_counter() - t)
    except BaseException:
        stepper.close()
        raise
    setup = {
        "make_s": t_made - t0,
        "reset_s": t_reset - t_made,
        "first_step_s": step_s[0] if step_s else None,
        "warmup_steps_s": step_s[1:],
        # What a user waits for before the first useful step: make + reset + the (compiling) first step.
        "time_to_first_step_s": t_reset - t0 + (step_s[0] if step_s else 0.0),
    }
    if impl == "mjx":
        setup["jax_cache_entries_before_after"] = [cache_before, _jax_cache_entries()]
    return stepper, setup


def timed_steps(stepper: Stepper, seconds: float, device: str) -> tuple[int, float]:
    """Step for at least ``seconds``; returns (batch steps, wall seconds).

    The device is synchronised at both ends, so the window holds exactly the work of its steps; in between
    the clock is read without synchronising (it only decides when to stop), which keeps the GPU's queue full.
    Reading it every step costs ~0.1 us, nothing against a step of >= 16 envs.
    """
    steps = 0
    sync(device)
    start = time.perf_counter()
    deadline = start + seconds
    while time.perf_counter() < deadline or steps == 0:
        stepper.step()
        steps += 1
    sync(device)
    return steps, time.perf_counter() - start


def measure_round(
    steppers: Sequence[Stepper], seconds: float, slices: int, device: str, failed: dict[str, BaseException]
) -> dict[str, float]:
    """Env steps/s of each implementation over ``seconds`` each, in ``slices`` interleaved slices.

    An implementation whose step raises is put in ``failed`` and left out from then on, so that the others
    still get their figures.
    """
    steps = {s.name: 0 for s in steppers}
    wall = {s.name: 0.0 for s in steppers}
    for _ in range(slices):
        for s in steppers:
            if s.name in failed:
                continue
            try:
                k, dt = timed_steps(s, seconds / slices, device)
            except Exception as err:
                failed[s.name] = err
                continue
            steps[s.name] += k
            wall[s.name] += dt
    return {s.name: steps[s.name] * s.num_envs / wall[s.name] for s in steppers if s.name not in failed}


def _failure(err: BaseException) -> dict[str, str]:
    """A missing extra is "not measured"; anything else is an error (and the exit status says so)."""
    if isinstance(err, ImportError):
        return {"not measured": f"{type(err).__name__}: {err}"}
    return {"error": f"{type(err).__name__}: {err}"}


def run_task(
    task: str,
    num_envs: Sequence[int],
    impls: Sequence[str],
    device: str,
    rounds: int,
    seconds: float,
    slices: int,
    warmup_steps: int,
    peer_max_envs: int,
    seed: int,
    log: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Every figure of one task: per N and implementation, setup times, steps/s and ratio to the peer."""
    results: list[dict[str, Any]] = []
    for n in num_envs:
        peer_n = min(n, peer_max_envs)
        steppers: list[Stepper] = []
        rows: dict[str, dict[str, Any]] = {}
        try:
            for impl in ("peer", *impls):
                n_impl = peer_n if impl == "peer" else n
                row: dict[str, Any] = {"task": task, "num_envs": n, "impl": impl, "impl_num_envs": n_impl}
                if impl == "peer":
                    row["peer"] = peer_spec(task)
                rows[impl] = row
                log(f"  {task} N={n}: building {impl} ({n_impl} envs) ...")
                try:
                    stepper, row["setup"] = build(task, impl, n_impl, device, seed, warmup_steps)
                except Exception as err:  # one broken backend must not cost the others' figures
                    row.update(_failure(err))
                    row["traceback"] = traceback.format_exc(limit=-6)
                    log(f"  {task} N={n}: {impl} failed: {next(iter(_failure(err).values()))}")
                    continue
                steppers.append(stepper)
                log(
                    f"  {task} N={n}: {impl} ready, time to first step {row['setup']['time_to_first_step_s']:.1f} s"
                )
            per_round: dict[str, list[float]] = {s.name: [] for s in steppers}
            load: list[float | None] = []
            failed: dict[str, BaseException] = {}
            for r in range(rounds):
                order = steppers[r % len(steppers) :] + steppers[: r % len(steppers)] if steppers else []
                for name, value in measure_round(order, seconds, slices, device, failed).items():
                    per_round[name].append(value)
                now = _load()
                load.append(None if now is None else now[0])
                log(
                    f"  {task} N={n} round {r + 1}/{rounds}: "
                    + ", ".join(f"{k} {v[-1]:,.0f}" for k, v in per_round.items())
                )
        finally:
            for s in steppers:
                s.close()
        for name, err in failed.items():
            rows[name].update(_failure(err), partial_steps_per_s_rounds=per_round.pop(name))
            log(f"  {task} N={n}: {name} failed while stepping: {type(err).__name__}: {err}")
        peer = per_round.get("peer")
        for impl, row in rows.items():
            values = per_round.get(impl)
            if values is None:
                if "error" not in row and "not measured" not in row:
                    row["error"] = "no figures recorded for this implementation"
                results.append(row)
                continue
            # Within a round (same load), then the median over rounds.
            ratios = None if peer is None else [v / b for v, b in zip(values, peer, strict=True)]
            row.update(
                steps_per_s_rounds=values,
                steps_per_s_median=statistics.median(values),
                ratio_to_peer_rounds=ratios,
                ratio_to_peer=None if ratios is None else statistics.median(ratios),
                load_average_1min_rounds=load,
            )
            results.append(row)
    return results


def not_measured_rows(
    tasks: Sequence[str], num_envs: Sequence[int], impls: Sequence[str], reason: str
) -> list[dict[str, Any]]:
    """The rows a run would have produced, each saying why it has no figure."""
    return [
        {"task": t, "num_envs": n, "impl": impl, "not measured": reason}
        for t in tasks
        for n in num_envs
        for impl in ("peer", *impls)
    ]


def _cell(value: float | None, digits: str = ",.0f") -> str:
    return "–" if value is None else format(value, digits)


def markdown_table(results: Sequence[dict[str, Any]]) -> str:
    """One row per task, N and implementation: median env steps/s, median ratio to the peer, setup time."""
    lines = [
        "| task | N | backend | env steps/s | × peer | time to first step (s) |",
        "|---|---:|---|---:|---:|---:|",
    ]
    for r in results:
        impl = (
            r["impl"]
            if r.get("impl_num_envs", r["num_envs"]) == r["num_envs"]
            else f"{r['impl']} (N={r['impl_num_envs']})"
        )
        if "steps_per_s_median" not in r:
            why = r.get("not measured") or r.get("error", "")
            label = "not measured" if "not measured" in r else "error"
            lines.append(f"| {r['task']} | {r['num_envs']} | {impl} | {label}: {why} | – | – |")
            continue
        ratio = "1" if r["impl"] == "peer" else _cell(r["ratio_to_peer"], ".2f")
        setup = r["setup"]["time_to_first_step_s"]
        lines.append(
            f"| {r['task']} | {r['num_envs']} | {impl} | {_cell(r['steps_per_s_median'])} | {ratio} "
            f"| {_cell(setup, '.1f')} |"
        )
    return "\n".join(lines)


def describe_machine(device: str, cuda: bool) -> dict[str, Any]:
    """bench.common's machine description plus the simulator stack's versions and devices."""
    info = machine_info(torch.get_num_threads(), device if cuda else "cpu")
    info["requested_device"] = device
    info["cuda_available"] = torch.cuda.is_available()
    info["versions"].update({d: _version(d) for d in EXTRA_VERSIONS})
    # Which tracked files differed from the commit: the figures are of the working tree, not of git_commit.
    info["git_modified_files"] = (_git("status", "--porcelain", "--untracked-files=no") or "").splitlines()
    try:
        # mjx_physics first: it stops JAX from reserving 75% of GPU memory and sets up the compilation cache,
        # both of which only work before JAX starts.
        import jax
        import robot_rl.envs.sim.mjx_physics  # noqa: F401

        info["jax_devices"] = [str(d) for d in jax.devices()]
    except Exception as err:  # the mjx extra may be missing; that is recorded, not fatal
        info["jax_devices"] = f"unavailable: {type(err).__name__}: {err}"
    return info


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="fewer sizes, shorter measurements (indicative only)")
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"), help="torch device of the envs")
    p.add_argument(
        "--num-envs",
        type=int,
        nargs="+",
        default=None,
        help="default 1024 2048 4096 8192 on cuda (1024 4096 quick), 16 64 256 on cpu (16 64 quick)",
    )
    p.add_argument("--tasks", nargs="+", default=list(DEFAULT_TASKS), choices=task_names())
    p.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=BACKENDS)
    p.add_argument("--rounds", type=int, default=None, help="default 3 (2 with --quick)")
    p.add_argument(
        "--seconds", type=float, default=None, help="per implementation and round; default 3 (1 quick)"
    )
    p.add_argument("--slices", type=int, default=None, help="slices a round is cut into; default 6 (4 quick)")
    p.add_argument(
        "--warmup-steps", type=int, default=None, help="untimed steps after reset; default 10 (5 quick)"
    )
    p.add_argument("--peer-max-envs", type=int, default=64, help="the peer runs at min(N, this) envs")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--out", type=Path, default=None, help="default bench/results/<date>-sim-backends-<device>.json"
    )
    args = p.parse_args(argv)
    quick = args.quick
    num_envs = args.num_envs or (
        ([1024, 4096] if quick else [1024, 2048, 4096, 8192])
        if args.device == "cuda"
        else ([16, 64] if quick else [16, 64, 256])
    )
    rounds = args.rounds or (2 if quick else 3)
    seconds = args.seconds or (1.0 if quick else 3.0)
    slices = args.slices or (4 if quick else 6)
    warmup_steps = args.warmup_steps if args.warmup_steps is not None else (5 if quick else 10)
    warmup_steps = max(warmup_steps, 1)  # the first step is where compilation happens: never time it
    out = args.out or results_path(f"sim-backends-{args.device}")
    cuda = args.device == "cuda" and torch.cuda.is_available()
    config = {
        "device": args.device,
        "tasks": args.tasks,
        "num_envs": num_envs,
        "backends": args.backends,
        "peers": {t: peer_spec(t) for t in args.tasks},
        "peer_max_envs": args.peer_max_envs,
        "rounds": rounds,
        "seconds_per_impl_and_round": seconds,
        "slices_per_round": slices,
        "warmup_steps": warmup_steps,
        "action_pool": ACTION_POOL,
        "seed": args.seed,
        "quick": quick,
        "command": "python -m bench.sim_backends " + " ".join(sys.argv[1:] if argv is None else argv),
        "unit": "env steps/s = batch steps x num_envs / wall seconds (autoreset included)",
        "ratio": "median over rounds of (impl steps/s / peer steps/s) within the round; the peer runs at "
        "min(N, peer_max_envs) envs, its steps/s being flat in N",
        "setup": "make, reset, first step (MJX/Warp compile here), further warm-up steps; all outside the clock",
    }
    machine = describe_machine(args.device, cuda)
    print(
        f"# sim backends on {args.device}: {machine['cpu']}, {machine['cores']} CPUs, "
        f"load average {machine['load_average']}",
        flush=True,
    )
    failed = False
    if args.device == "cuda" and not cuda:
        print(f"# --device cuda: {NOT_ON_THIS_DEVICE}; writing the rows as not measured", flush=True)
        results = not_measured_rows(args.tasks, num_envs, args.backends, NOT_ON_THIS_DEVICE)
    else:
        results = []
        for task in args.tasks:
            results += run_task(
                task,
                num_envs,
                args.backends,
                args.device,
                rounds,
                seconds,
                slices,
                warmup_steps,
                args.peer_max_envs,
                args.seed,
                log=lambda s: print(s, file=sys.stderr, flush=True),
            )
        failed = any("error" in r for r in results)
    machine["load_average_after"] = _load()
    table = markdown_table(results)
    print(table)
    write_json(out, {"machine": machine, "config": config, "results": results, "table": table})
    print(f"wrote {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
