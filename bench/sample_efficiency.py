"""Sample efficiency at 100k environment steps: robot_rl's default agent against Stable-Baselines3's SAC.

Tasks (env steps = simulator control steps = frames):
- gymnasium Hopper-v5, Walker2d-v5, HalfCheetah-v5, Ant-v5, Humanoid-v5: 100k env steps, action repeat 1;
- dm_control cartpole-swingup, walker-walk, cheetah-run, finger-spin, finger-turn_easy, hopper-stand,
  quadruped-walk, reacher-hard, walker-run, walker-stand: 100k frames at action repeat 2 (50k agent decisions).
All but cartpole-swingup and walker-walk form issue 60's 13-task suite, whose score on SimbaV2's scale (normalised
IQM with a stratified bootstrap interval, per-task table, suite.png) the report adds (bench/suite.py).

Protocol, identical for both libraries: every 10k env steps, 10 deterministic episodes on robot_rl's batched
evaluation envs from fixed seeds (`seed + EVAL_SEED_OFFSET + i` for episode i: the same initial states at every
evaluation and for both libraries). Both train on the same environment (`robot_rl.envs.make`/`robot_rl.envs.make_single` of the
same spec: float32 observations, actions in [-1, 1]). SB3 runs SAC at its defaults (bench/sb3.py); robot_rl
runs `robot-rl train` at its defaults (the default agent) with the protocol's steps and evaluation settings,
and `learning_starts` of 5k frames. Each run is one process with one torch thread; `--jobs` runs side by side.

Every run writes a `metrics.csv` in robot_rl's format (`env_step` counts agent steps; frames = env_step x
action repeat), so `robot_rl.stats` aggregates both libraries the same way: the IQM and mean over seeds at
each evaluation, with 95% bootstrap intervals. Wall time per run and training env steps/s (evaluation time
excluded) are reported for both. Published SimbaV2 / FlashSAC curves (bench/reference/, gymnasium v4) are
drawn as dashed reference lines where that file has them.

Runs are resumable: running the same command again skips finished runs and continues robot_rl runs from
their latest checkpoint and SB3 runs from their last evaluation. `--report` only aggregates what exists. The
results file (`bench/results/<date>-sample-efficiency.json`) always covers every task with a finished run, whatever
subset a call ran. `--seeds N` runs seeds 0..N-1, `--seed-list 2,0,1` exactly those seeds in that order. A variant of robot_rl (`--ours` overrides) goes in its own `--out-dir` and results file
(`<date>-sample-efficiency-<dir name>.json`); the README table is the default agent's.

    python -m bench.sample_efficiency --tasks hopper,walker2d --seeds 5 --jobs 2
    python -m bench.sample_efficiency --report --update-readme
    python -m bench.sample_efficiency --tasks hopper --libs ours --ours "agent.optimiser.compile=true agent.optimiser.bf16=true" \
        --out-dir bench/results/sample_efficiency_compile_bf16
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from bench.common import REPO_DIR, RESULTS_DIR
from bench.suite import paired_comparison, paired_table, plot_suite, suite_summary, suite_table
from robot_rl import stats

OUT_DIR = RESULTS_DIR / "sample_efficiency"
EVAL_EVERY_FRAMES = 10_000
EVAL_EPISODES = 10
LEARNING_STARTS_FRAMES = 5_000
README_MARK = ("<!-- sample-efficiency table: start -->", "<!-- sample-efficiency table: end -->")


@dataclass(frozen=True)
class Task:
    spec: str
    frames: int
    action_repeat: int
    seeds: int  # the default number of seeds (the minimum)
    reference: str  # the task's name in bench/reference/published_curves.csv (their runs: gymnasium v4)
    # the return whose training time the table reports (time to a return, issue 57): about what SAC reaches at
    # 100k on the task, so that both libraries' times exist on most seeds
    threshold: float

    @property
    def agent_steps(self) -> int:
        return self.frames // self.action_repeat


TASKS = {
    "hopper": Task("gym:Hopper-v5", 100_000, 1, 5, "hopper", 1_000),
    "walker2d": Task("gym:Walker2d-v5", 100_000, 1, 5, "walker2d", 1_000),
    "halfcheetah": Task("gym:HalfCheetah-v5", 100_000, 1, 3, "halfcheetah", 4_000),
    "cartpole-swingup": Task("dmc:cartpole-swingup", 100_000, 2, 3, "cartpole-swingup", 800),
    "walker-walk": Task("dmc:walker-walk", 100_000, 2, 3, "walker-walk", 500),
    # Issue 60's suite adds SimbaV2's other gymnasium tasks and eight dm_control tasks (bench/suite.py scores them on
    # SimbaV2's scale); the thresholds are about the published SAC mean at 100k (hopper-stand's 31 is barely off
    # the floor: 100 instead).
    "ant": Task("gym:Ant-v5", 100_000, 1, 3, "ant", 750),
    "humanoid": Task("gym:Humanoid-v5", 100_000, 1, 3, "humanoid", 600),
    "cheetah-run": Task("dmc:cheetah-run", 100_000, 2, 3, "cheetah-run", 180),
    "finger-spin": Task("dmc:finger-spin", 100_000, 2, 3, "finger-spin", 475),
    "finger-turn_easy": Task("dmc:finger-turn_easy", 100_000, 2, 3, "finger-turn_easy", 285),
    "hopper-stand": Task("dmc:hopper-stand", 100_000, 2, 3, "hopper-stand", 100),
    "quadruped-walk": Task("dmc:quadruped-walk", 100_000, 2, 3, "quadruped-walk", 115),
    "reacher-hard": Task("dmc:reacher-hard", 100_000, 2, 3, "reacher-hard", 600),
    "walker-run": Task("dmc:walker-run", 100_000, 2, 3, "walker-run", 110),
    "walker-stand": Task("dmc:walker-stand", 100_000, 2, 3, "walker-stand", 885),
}
LIBRARIES = ("ours", "sb3")


def run_dir(out: Path, task: str, lib: str, seed: int) -> Path:
    return out / task / lib / f"seed_{seed}"


def finished(path: Path, task: Task) -> bool:
    try:
        curve = stats.load_curve(path)
    except FileNotFoundError:
        return False
    return bool(curve) and max(curve) >= task.agent_steps


def ours_command(task: Task, seed: int, path: Path, overrides: list[str]) -> list[str]:
    if (path / "checkpoints" / "latest.pt").is_file():
        return [sys.executable, "-m", "robot_rl.cli", "train", f"resume={path}", "quiet=true"]
    k = task.action_repeat
    return [
        sys.executable, "-m", "robot_rl.cli", "train",
        f"env.spec={task.spec}", f"env.action_repeat={k}", f"train.steps={task.agent_steps}",
        f"train.eval_every={EVAL_EVERY_FRAMES // k}", f"env.num_eval_envs={EVAL_EPISODES}",
        f"train.learning_starts={LEARNING_STARTS_FRAMES // k}", "train.video=false", "threads=1", "quiet=true",
        f"seed={seed}", f"run_dir={path}", *overrides,
    ]


def _drop_partial_run(path: Path) -> None:
    """An unfinished robot_rl run without its checkpoint (checkpoints are not committed: a fresh clone has only the
    metrics of a run interrupted in an earlier session) starts again: its partial files would refuse a new run."""
    if path.is_dir() and not (path / "checkpoints" / "latest.pt").is_file():
        for name in ("metrics.csv", "config.yaml", "learning_curve.png", "output.log"):
            (path / name).unlink(missing_ok=True)
        shutil.rmtree(path / "tensorboard", ignore_errors=True)


def sb3_command(task_name: str, seed: int, path: Path) -> list[str]:
    return [sys.executable, "-m", "bench.sample_efficiency", "--sb3-run", task_name, str(seed), str(path)]


# -- one SB3 run (a child process) --------------------------------------------------------------------------
def sb3_run(task_name: str, seed: int, path: Path) -> None:
    """SB3 SAC at its defaults on robot_rl's env, evaluated by robot_rl's evaluation on the same initial states.

    At every evaluation the model, its replay buffer and the rows so far are saved (`sb3_checkpoint/`), so an
    interrupted run continues from its last evaluation (with fresh episodes and random state, as ours does).
    """
    import torch
    from stable_baselines3 import SAC
    from stable_baselines3.common.callbacks import BaseCallback

    from bench.sb3 import SB3_SAC_DEFAULTS
    from robot_rl import envs
    from robot_rl.evaluation import evaluate
    from robot_rl.trainer import EVAL_SEED_OFFSET

    torch.set_num_threads(1)
    task = TASKS[task_name]
    path.mkdir(parents=True, exist_ok=True)
    ckpt = path / "sb3_checkpoint"
    env = envs.make_single(task.spec, seed=seed, action_repeat=task.action_repeat)
    eval_env = envs.make(task.spec, num_envs=EVAL_EPISODES, action_repeat=task.action_repeat)
    rows: list[dict] = []
    offset = {"wall": 0.0, "eval": 0.0}
    if (ckpt / "rows.json").is_file():
        model = SAC.load(ckpt / "model.zip", env=env, device="cpu")
        model.load_replay_buffer(ckpt / "replay.pkl")
        # a kill between the renames leaves rows one evaluation behind the model: keep what the model has seen
        rows = [r for r in json.loads((ckpt / "rows.json").read_text()) if r["env_step"] <= model.num_timesteps]
        offset = {"wall": rows[-1]["wall_time_s"], "eval": rows[-1]["eval_time_s"]}
        print(f"resuming from env step {model.num_timesteps}", flush=True)
    else:
        model = SAC("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **SB3_SAC_DEFAULTS)
    every = EVAL_EVERY_FRAMES // task.action_repeat
    columns = ["env_step", "wall_time_s", "eval_time_s", "eval_return_mean", "eval_return_std", "env_steps_per_s"]

    class Evaluate(BaseCallback):
        def _on_training_start(self) -> None:
            self.t0, self.eval_s, self.start_step = time.monotonic(), 0.0, self.num_timesteps

        def _on_step(self) -> bool:
            if self.num_timesteps % every:
                return True
            t = time.monotonic()

            def policy(obs: dict[str, torch.Tensor]) -> torch.Tensor:
                return torch.as_tensor(self.model.predict(obs["state"].numpy(), deterministic=True)[0])

            result = evaluate(policy, eval_env, seed=seed + EVAL_SEED_OFFSET)
            self.eval_s += time.monotonic() - t
            wall = time.monotonic() - self.t0
            rows.append({
                "env_step": self.num_timesteps, "wall_time_s": round(offset["wall"] + wall, 2),
                "eval_time_s": round(offset["eval"] + self.eval_s, 2),
                "eval_return_mean": result["eval_return_mean"], "eval_return_std": result["eval_return_std"],
                "env_steps_per_s": round((self.num_timesteps - self.start_step) / max(wall - self.eval_s, 1e-9), 2),
            })
            if self.num_timesteps < task.agent_steps:
                ckpt.mkdir(exist_ok=True)
                self.model.save(ckpt / "model.next.zip")
                self.model.save_replay_buffer(ckpt / "replay.next.pkl")
                (ckpt / "model.next.zip").replace(ckpt / "model.zip")
                (ckpt / "replay.next.pkl").replace(ckpt / "replay.pkl")
                tmp = ckpt / "rows.json.tmp"
                tmp.write_text(json.dumps(rows))
                tmp.replace(ckpt / "rows.json")  # last: a checkpoint counts only once all of it is written
            return True

    remaining = task.agent_steps - model.num_timesteps
    model.learn(total_timesteps=remaining, callback=Evaluate(), reset_num_timesteps=not rows)
    tmp = path / "metrics.csv.tmp"
    with open(tmp, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    tmp.replace(path / "metrics.csv")  # only a finished run leaves a metrics.csv
    for name in ("model.zip", "replay.pkl", "rows.json"):
        (ckpt / name).unlink(missing_ok=True)


# -- scheduling ---------------------------------------------------------------------------------------------
def pending_runs(tasks: list[str], libs: list[str], seeds: dict[str, list[int]], out: Path,
                 overrides: list[str]) -> list[tuple[str, Path, list[str]]]:
    """(label, run dir, command) of every run not finished yet, seed by seed in the order given, the tasks and the
    libraries alternating within a seed; a partial robot_rl run without a checkpoint is dropped here."""
    pending = []
    order = list(dict.fromkeys(seed for name in tasks for seed in seeds[name]))
    for seed in order:
        for name in tasks:
            if seed not in seeds[name]:
                continue
            for lib in libs:  # alternate libraries so that side-by-side runs load both alike
                path = run_dir(out, name, lib, seed)
                if finished(path, TASKS[name]):
                    continue
                if lib == "ours":
                    _drop_partial_run(path)
                cmd = ours_command(TASKS[name], seed, path, overrides) if lib == "ours" else sb3_command(name, seed, path)
                pending.append((f"{name}/{lib}/seed_{seed}", path, cmd))
    return pending


def run_all(tasks: list[str], libs: list[str], seeds: dict[str, list[int]], jobs: int, out: Path,
            overrides: list[str]) -> None:
    pending = pending_runs(tasks, libs, seeds, out, overrides)
    print(f"{len(pending)} runs to do, {jobs} at a time; logs in <run dir>/output.log", flush=True)
    running: list[tuple[str, subprocess.Popen, float]] = []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}
    while pending or running:
        while pending and len(running) < jobs:
            label, path, cmd = pending.pop(0)
            path.mkdir(parents=True, exist_ok=True)
            with open(path / "output.log", "a") as log:
                running.append((label, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                        cwd=REPO_DIR), time.monotonic()))
            print(f"{datetime.datetime.now():%H:%M} started {label}", flush=True)
        for item in list(running):
            label, proc, t0 = item
            if proc.poll() is not None:
                running.remove(item)
                status = "done" if proc.returncode == 0 else f"FAILED (exit {proc.returncode})"
                print(f"{datetime.datetime.now():%H:%M} {status} {label} after {time.monotonic() - t0:.0f}s",
                      flush=True)
        time.sleep(1.0)


# -- report -------------------------------------------------------------------------------------------------
def load_references() -> dict[str, dict[str, list[tuple[float, float, float]]]]:
    """{task: {legend label: [(frames, mean, std), ...]}} from the published curves (bench/reference/)."""
    from bench.reference import DEFAULT_PATH, load_reference, reference_labels

    if not DEFAULT_PATH.is_file():
        return {}
    labels = reference_labels()
    return {
        task: {labels[(task, method)]: [p for p in series if p[0] <= 100_000] for method, series in methods.items()}
        for task, methods in load_reference().items()
    }


def _training_rate(path: Path, task: Task) -> tuple[float | None, float | None]:
    """(wall time of the run in s, training env steps/s with evaluation time excluded) from its last row."""
    with open(path / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    last = rows[-1]
    wall = float(last["wall_time_s"])
    eval_s = float(last["eval_time_s"]) if last.get("eval_time_s") not in (None, "") else None
    frames = float(last["env_step"]) * task.action_repeat
    return wall, (frames / (wall - eval_s) if eval_s is not None and wall > eval_s else None)


def time_to_return(path: Path, threshold: float) -> float | None:
    """Training seconds (wall time less evaluation time) until the first evaluation whose mean return reaches
    `threshold`, from a run's metrics.csv; None when no evaluation of the run reached it.

    Why beside frames/s: the default agent does more work per step than SB3's SAC and needs fewer steps, and what a
    user waits for is the policy, not the step (issue 57's "time to a return")."""
    with open(path / "metrics.csv", newline="") as f:
        for row in csv.DictReader(f):
            if row.get("eval_return_mean") not in (None, "") and float(row["eval_return_mean"]) >= threshold:
                return float(row["wall_time_s"]) - float(row.get("eval_time_s") or 0.0)
    return None


def median_time(times: list[float | None]) -> float | None:
    """The median over seeds, a seed that never reached the return counting as the slowest (None: the median
    seed did not reach it)."""
    ordered = sorted(times, key=lambda t: float("inf") if t is None else t)
    return ordered[len(ordered) // 2] if ordered else None


def tasks_with_runs(out: Path) -> list[str]:
    """The benchmark's tasks that have at least one finished run (of either library) under `out`."""
    return [name for name, task in TASKS.items()
            if any(finished(path, task) for lib in LIBRARIES for path in (out / name / lib).glob("seed_*"))]


def is_default_out(out: Path) -> bool:
    """Whether `out` holds the default agent's runs (the README table's), not a variant's."""
    return out.resolve() == OUT_DIR.resolve()


def results_path(out: Path, day: datetime.date, against: Path | None = None) -> Path:
    """The day's results file. The default agent's runs (`OUT_DIR`) give `<date>-sample-efficiency.json`; another
    `--out-dir` (a variant, e.g. `--ours agent.optimiser.compile=true`) gives `<date>-sample-efficiency-<dir name>.json`, so a
    variant never overwrites the benchmark's file. A comparison with runs other than the default's (`--against`, two
    variants set against each other) adds `-vs-<their dir name>`, so it never replaces the variant's own file and its
    paired comparison with the default."""
    suffix = "" if is_default_out(out) else f"-{out.name}"
    if against is not None and not is_default_out(against):
        suffix += f"-vs-{against.name}"
    return RESULTS_DIR / f"{day}-sample-efficiency{suffix}.json"


def report(tasks: list[str], libs: list[str], out: Path, plot: bool = True) -> dict:
    references = load_references()
    ours_label = "robot_rl (default agent)" if is_default_out(out) else f"robot_rl ({out.name})"
    results: dict = {"protocol": {
        "eval_every_frames": EVAL_EVERY_FRAMES, "eval_episodes": EVAL_EPISODES,
        "learning_starts_frames_ours": LEARNING_STARTS_FRAMES, "sb3": "SAC at its defaults (bench/sb3.py)",
        "statistics": "IQM and mean over seeds with 95% percentile-bootstrap intervals (robot_rl.stats)",
    }, "tasks": {}}
    for name in tasks:
        task = TASKS[name]
        entry: dict = {"spec": task.spec, "frames": task.frames, "action_repeat": task.action_repeat,
                       "threshold": task.threshold, "libraries": {}}
        groups = {}
        for lib in libs:
            dirs = sorted(p.parent for p in (out / name / lib).glob("seed_*/metrics.csv") if finished(p.parent, task))
            if not dirs:
                continue
            summary = stats.summarize_runs(dirs)
            for point in summary["curve"]:
                point["frames"] = point["env_step"] * task.action_repeat
            timing = [_training_rate(d, task) for d in dirs]
            walls = [w for w, _ in timing]
            rates = [r for _, r in timing if r is not None]
            entry["libraries"][lib] = {
                "final": summary["final"], "curve": summary["curve"], "runs": [str(d) for d in dirs],
                "wall_time_s_median": sorted(walls)[len(walls) // 2],
                "train_frames_per_s_median": sorted(rates)[len(rates) // 2] if rates else None,
                "time_to_return_s": [time_to_return(d, task.threshold) for d in dirs],
            }
            entry["libraries"][lib]["time_to_return_s_median"] = median_time(entry["libraries"][lib]["time_to_return_s"])
            label = ours_label if lib == "ours" else "SB3 SAC (defaults)"
            groups[label] = {**summary, "x": "frames"}
        ours, sb3 = entry["libraries"].get("ours"), entry["libraries"].get("sb3")
        if ours and sb3 and sb3["final"]["mean"]:
            entry["ratio_mean"] = ours["final"]["mean"] / sb3["final"]["mean"]
            entry["ratio_wall_time"] = ours["wall_time_s_median"] / sb3["wall_time_s_median"]
        refs = references.get(task.reference, {})
        entry["references"] = {k: v[-1] for k, v in refs.items()}
        if groups and plot:
            stats.plot_curves(groups, out / f"{name}.png", title=f"{task.spec}, {task.frames:,} frames "
                              f"(action repeat {task.action_repeat})", references=refs)
        results["tasks"][name] = entry
    return results


def table(results: dict) -> str:
    lines = [
        "| task | robot_rl IQM [95% CI] | robot_rl mean [95% CI] | SB3 SAC mean [95% CI] | ratio of means | "
        "wall time per run, ours / SB3 | training frames/s, ours / SB3 | training minutes to the return, ours / SB3 "
        "(seeds that reached it) |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def cell(s: dict | None, key: str) -> str:
        if not s or not s["final"]["n"]:
            return "not run"
        f = s["final"]
        lo, hi = f[f"{key}_ci"]
        return f"{f[key]:,.0f} [{lo:,.0f}, {hi:,.0f}] (n={f['n']})"

    for entry in results["tasks"].values():
        ours, sb3 = entry["libraries"].get("ours"), entry["libraries"].get("sb3")
        ratio = f"{entry['ratio_mean']:.2f}x" if "ratio_mean" in entry else "-"
        wall = (f"{ours['wall_time_s_median'] / 60:.0f} / {sb3['wall_time_s_median'] / 60:.0f} min "
                f"({entry['ratio_wall_time']:.2f}x)" if ours and sb3 else "-")
        rate = (f"{ours['train_frames_per_s_median']:.0f} / {sb3['train_frames_per_s_median']:.0f}"
                if ours and sb3 and ours["train_frames_per_s_median"] and sb3["train_frames_per_s_median"] else "-")
        lines.append(f"| {entry['spec']} @{entry['frames'] // 1000}k frames (repeat {entry['action_repeat']}) | "
                     f"{cell(ours, 'iqm')} | {cell(ours, 'mean')} | {cell(sb3, 'mean')} | {ratio} | {wall} | {rate} | "
                     f"{reach_cell(entry)} |")
    lines.append("")
    for entry in results["tasks"].values():
        per_lib = []
        for lib, label in (("ours", "robot_rl"), ("sb3", "SB3")):
            s = entry["libraries"].get(lib)
            if s and s["final"]["n"]:
                per_lib.append(f"{label} {', '.join(f'{v:,.0f}' for v in s['final']['values'])}")
        refs = "; ".join(f"{k}: {v[1]:,.0f} ± {v[2]:,.0f}" for k, v in entry.get("references", {}).items())
        lines.append(f"- {entry['spec']}: per seed at the last evaluation, {'; '.join(per_lib) or 'none'}"
                     + (f". Published at 100k: {refs}." if refs else "."))
    return "\n".join(lines)


def reach_cell(entry: dict) -> str:
    """'<return>: <ours> / <SB3> min (<reached>/<seeds>, <reached>/<seeds>)' for the table (`time_to_return`)."""
    if "threshold" not in entry:  # a results file written before the column
        return "-"
    parts, counts = [], []
    for lib in ("ours", "sb3"):
        s = entry["libraries"].get(lib)
        if not s or "time_to_return_s" not in s:
            parts.append("-")
            continue
        times, median = s["time_to_return_s"], s["time_to_return_s_median"]
        parts.append("not reached" if median is None else f"{median / 60:.0f}")
        counts.append(f"{sum(t is not None for t in times)}/{len(times)}")
    return f"{entry['threshold']:,.0f}: {' / '.join(parts)} ({', '.join(counts)})"


def update_readme(text: str) -> None:
    readme = REPO_DIR / "bench" / "README.md"
    content = readme.read_text()
    start, end = README_MARK
    if start in content and end in content:
        head, rest = content.split(start, 1)
        content = head + start + "\n" + text + "\n" + end + rest.split(end, 1)[1]
        readme.write_text(content)
    else:
        print(f"bench/README.md has no {start} ... {end} block; table not written", file=sys.stderr)


def selection(tasks: str, libs: str) -> tuple[list[str], list[str]]:
    """The task and library names of `--tasks`/`--libs` (comma-separated; `both` means every library)."""
    task_names = [t for t in tasks.split(",") if t]
    lib_names = list(LIBRARIES) if libs == "both" else [lib for lib in libs.split(",") if lib]
    bad = [t for t in task_names if t not in TASKS] + [lib for lib in lib_names if lib not in LIBRARIES]
    if bad:
        raise ValueError(f"unknown task or library {bad[0]!r}; tasks: {', '.join(TASKS)}; "
                         f"libraries: {', '.join(LIBRARIES)} or both")
    return task_names, lib_names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated, of: {', '.join(TASKS)}")
    p.add_argument("--libs", default="both", help=f"comma-separated, of: {', '.join(LIBRARIES)}; or both (default)")
    p.add_argument("--seeds", type=int, default=None, help="seeds per task (default: 5 on Hopper/Walker2d, 3 else)")
    p.add_argument("--seed-list", default=None,
                   help="comma-separated seeds to run, in this order (e.g. 2 or 2,0,1), instead of 0..--seeds-1")
    p.add_argument("--jobs", type=int, default=2, help="runs side by side (one torch thread each)")
    p.add_argument("--out-dir", type=Path, default=OUT_DIR, help="where the run directories go")
    p.add_argument("--ours", default="", help="extra Hydra overrides for robot_rl, space-separated (e.g. agent=sac)")
    p.add_argument("--report", action="store_true",
                   help="only aggregate the runs that exist (every task with a finished run in --out-dir)")
    p.add_argument("--against", type=Path, default=None,
                   help="for a variant's --out-dir: the runs to compare it with, seed by seed (default: the default "
                        f"agent's, bench/results/{OUT_DIR.name}); against another variant the results go to "
                        "<date>-sample-efficiency-<out dir>-vs-<against dir>.json")
    p.add_argument("--update-readme", action="store_true",
                   help="write the table into bench/README.md (the default agent's runs only)")
    p.add_argument("--sb3-run", nargs=3, metavar=("TASK", "SEED", "DIR"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.sb3_run:
        sb3_run(args.sb3_run[0], int(args.sb3_run[1]), Path(args.sb3_run[2]))
        return 0
    try:
        tasks, libs = selection(args.tasks, args.libs)
    except ValueError as e:
        p.error(str(e))
    default_out = is_default_out(args.out_dir)
    if args.update_readme and not default_out:
        p.error(f"--update-readme writes the default agent's table (runs in bench/results/{OUT_DIR.name}); "
                f"the table of {args.out_dir} is in its own results file, printed below a run or --report")
    if args.ours and default_out and not args.report:
        p.error(f"--ours changes robot_rl's runs: give them their own --out-dir (e.g. bench/results/"
                f"sample_efficiency_<variant>) so they do not mix with the default agent's in {OUT_DIR.name}")
    if args.against is not None and not args.against.is_dir():
        p.error(f"--against {args.against}: no such folder (give a --out-dir that holds runs, e.g. "
                f"bench/results/{OUT_DIR.name})")
    try:
        seed_list = None if args.seed_list is None else [int(x) for x in args.seed_list.split(",") if x.strip()]
    except ValueError:
        p.error(f"--seed-list takes comma-separated integers (e.g. 2,0,1), got {args.seed_list!r}")
    if seed_list is not None and (not seed_list or min(seed_list) < 0):
        p.error(f"--seed-list needs at least one seed, each >= 0, got {args.seed_list!r}")
    if seed_list is not None and args.seeds is not None:
        p.error("give --seeds (seeds 0..N-1) or --seed-list (these seeds), not both")
    seeds = {t: seed_list or list(range(args.seeds or TASKS[t].seeds)) for t in tasks}
    if not args.report:
        run_all(tasks, libs, seeds, args.jobs, args.out_dir, args.ours.split())
    from bench.common import machine_info

    # the results file is the state of the whole benchmark in --out-dir, whatever subset this call ran: a run of
    # one task used to rewrite the day's file with that task alone
    results = report(tasks_with_runs(args.out_dir), list(LIBRARIES), args.out_dir)
    results["date"] = f"{datetime.date.today()}"
    results["machine"] = machine_info(1, "cpu")
    results_file = results_path(args.out_dir, datetime.date.today(), args.against)
    name = results_file.name
    m = results["machine"]
    text = (f"Reported {results['date']} (`bench/results/{name}`): {m.get('cpu')}, {m.get('cores')} cores, one torch "
            f"thread per run, two runs side by side. n = seeds finished; with n = 1 a figure is an anecdote.\n\n"
            + table(results))
    print(text)
    suite = suite_summary(results)
    if suite["n_tasks"]:
        plot_suite(suite, args.out_dir / "suite.png")
        suite_text = suite_table(suite)
        print("\n" + suite_text)
        text += "\n\n" + suite_text
    results["suite"] = suite
    against = args.against or (None if default_out else OUT_DIR)
    if against is not None:
        baseline = report(tasks_with_runs(against), ["ours"], against, plot=False)
        results["paired"] = {"against": str(against), **paired_comparison(results, baseline)}
        paired_text = paired_table(results["paired"], args.out_dir.name, against.name)
        print("\n" + paired_text)
        text += "\n\n" + paired_text
    results["table"] = text
    path = stats.write_json(results, results_file)
    print(f"results: {path}; plots: {args.out_dir}/<task>.png, {args.out_dir}/suite.png")
    if args.update_readme:
        update_readme(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
