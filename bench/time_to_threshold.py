"""(c) Wall-clock to a return threshold, each library with its best documented settings: Pendulum-v1 to -200
(robot_rl's `experiment=pendulum` against SB3 with its rl-zoo hyperparameters) and dm_control cartpole-swingup
to 800 (robot_rl's `experiment=cartpole_swingup`; SB3 has no dm_control adapter installed, so ours only).

Method: every `eval_every` env steps (robot_rl's preset value; SB3 evaluates at the same steps with the same
number of deterministic episodes, from fixed initial states) the mean evaluation return is compared with the
threshold; the run stops at the first evaluation that reaches it. Two times are reported: training time, which
excludes evaluation (and logging, plotting, checkpoints: the hooks time and subtract them) and is the headline
figure, and wall-clock including evaluation (robot_rl: `wall_time_s` of that metrics.csv row). Neither includes
building the model or envs. A run that spends its budget (env steps or training seconds) is "not reached".
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import common
from robot_rl.config import compose_train_config, presets
from robot_rl.trainer import EVAL_SEED_OFFSET


@dataclass
class Task:
    name: str
    threshold: float
    experiments: tuple[str, ...]  # robot_rl's documented presets for the task, best first: the first present
    ours: list[str]  # further Hydra overrides
    sb3_env: str | None = None  # None: no SB3 run
    sb3_hparams: dict[str, Any] = field(default_factory=dict)  # on top of SB3's SAC defaults
    quick: tuple[int, float, int] = (10_000, 300.0, 1)  # budget: env steps, training seconds, seeds
    full: tuple[int, float, int] = (20_000, 1200.0, 3)


TASKS = {
    "pendulum": Task(
        # pendulum_fast: the preset tuned for wall-clock to -200; pendulum: the default, where it is absent.
        "Pendulum-v1", -200.0, ("pendulum_fast", "pendulum"), [], sb3_env="Pendulum-v1",
        # rl-baselines3-zoo hyperparams/sac.yml, Pendulum-v1: n_timesteps 20000, policy MlpPolicy,
        # learning_rate 1e-3; every other setting is SB3's default.
        sb3_hparams={"learning_rate": 1e-3},
    ),
    "cartpole": Task(
        "dmc cartpole-swingup", 800.0,
        # The preset: action repeat 8, 12,500 agent steps (= 100k env steps), evaluated every 1,250.
        ("cartpole_swingup",), [],
        quick=(12_500, 300.0, 1), full=(25_000, 1800.0, 3),
    ),
}


def ours_overrides(task: Task, extra: list[str]) -> list[str]:
    """The task's preset and overrides; an `experiment=` among the extra overrides replaces the preset."""
    chosen = next((e for e in task.experiments if e in presets("experiment")), task.experiments[-1])
    preset = [] if any(o.startswith("experiment=") for o in extra) else [f"experiment={chosen}"]
    return [*preset, *task.ours, *extra]


def run_ours(task: Task, seed: int, threads: int, device: str, steps: int, max_train_s: float,
             extra: list[str]) -> dict[str, Any]:
    cfg = compose_train_config([*ours_overrides(task, extra), f"seed={seed}", f"threads={threads}", f"device={device}",
                                f"train.steps={steps}", f"train.checkpoint_every={common.NEVER}",
                                "train.video=false", "quiet=true"])
    with tempfile.TemporaryDirectory(prefix="bench-ttt-") as run_dir:
        t = common.run_trainer(common.TimedTrainer(cfg, Path(run_dir), threshold=task.threshold,
                                                    max_train_s=max_train_s))
        hit = common.first_row_at(Path(run_dir) / "metrics.csv", task.threshold)
    return {
        "seed": seed, "reached": t.reached is not None,
        "env_steps": t.reached["env_step"] if t.reached else None,
        "train_s": t.reached["train_s"] if t.reached else None,
        "wall_s": float(hit["wall_time_s"]) if hit else None,
        "steps_run": t.env_steps, "eval_every": cfg.train.eval_every, "eval_episodes": cfg.env.num_eval_envs,
        "curve": t.curve,
    }


def run_sb3(task: Task, seed: int, device: str, steps: int, max_train_s: float, eval_every: int,
            episodes: int) -> dict[str, Any]:
    from bench.sb3 import Probe, make_sac

    model = make_sac(task.sb3_env, seed, device, **task.sb3_hparams)
    probe = Probe(model.learning_starts, task.sb3_env, eval_every, episodes, seed + EVAL_SEED_OFFSET,
                  task.threshold, max_train_s)
    model.learn(total_timesteps=steps, callback=probe)
    hit = probe.reached
    return {
        "seed": seed, "reached": hit is not None, "env_steps": hit["env_step"] if hit else None,
        "train_s": hit["train_s"] if hit else None, "wall_s": hit["wall_s"] if hit else None,
        "steps_run": model.num_timesteps, "eval_every": eval_every, "eval_episodes": episodes, "curve": probe.curve,
    }


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over seeds, an unreached seed counting as infinitely slow (so a median can be 'not reached')."""
    out: dict[str, Any] = {"reached": f"{sum(r['reached'] for r in runs)}/{len(runs)}"}
    for key in ("train_s", "wall_s", "env_steps"):
        med = common.median([r[key] if r["reached"] else math.inf for r in runs])
        out[key] = None if math.isinf(med) else med
    return out


def run(quick: bool, threads: int, device: str, tasks: list[str], seeds: int | None = None,
        extra: dict[str, list[str]] | None = None) -> dict[str, Any]:
    extra = extra or {}
    results: dict[str, Any] = {}
    rows = []
    for key in tasks:
        task = TASKS[key]
        steps, max_train_s, n_seeds = task.quick if quick else task.full
        n_seeds = seeds or n_seeds
        runs: dict[str, list[dict[str, Any]]] = {"robot_rl": [], "sb3": []}
        for seed in range(n_seeds):  # ours, then SB3, per seed: load drifts hit both alike
            ours = run_ours(task, seed, threads, device, steps, max_train_s, extra.get(key, []))
            runs["robot_rl"].append(ours)
            if task.sb3_env:
                runs["sb3"].append(run_sb3(task, seed, device, steps, max_train_s, ours["eval_every"],
                                           ours["eval_episodes"]))
            print(f"  [time-to-threshold] {task.name} seed {seed}: " + "; ".join(
                f"{lib} {'reached at ' + format(r[-1]['train_s'], '.0f') + ' s' if r[-1]['reached'] else 'not reached'}"
                for lib, r in runs.items() if r), flush=True)
        summary = {lib: summarise(r) for lib, r in runs.items() if r}
        results[key] = {"task": task.name, "threshold": task.threshold, "robot_rl_overrides": ours_overrides(task, extra.get(key, [])), "sb3_hparams": task.sb3_hparams if task.sb3_env else None,
            "budget": {"env_steps": steps, "train_s": max_train_s}, "seeds": n_seeds, "summary": summary, "runs": runs}
        ours_s, sb3_s = summary["robot_rl"], summary.get("sb3")
        budget = f"budget {steps:,} steps / {max_train_s:.0f} s"
        reached = f"reached {ours_s['reached']}" + (f" vs SB3 {sb3_s['reached']}" if sb3_s else "")
        bench_name = f"(c) {task.name} to {task.threshold:g}"
        no_sb3 = "" if sb3_s else "; SB3: no dm_control adapter installed"
        for i, (metric, k, target) in enumerate((("s to threshold, excl. eval (median)", "train_s",
                                                  "≥ 5× faster" if sb3_s else "measured"),
                                                 ("s to threshold, incl. eval (median)", "wall_s", ""),
                                                 ("env steps to threshold (median)", "env_steps", ""))):
            theirs = sb3_s[k] if sb3_s else None
            rows.append(common.row(bench_name, metric, _or_not_reached(ours_s[k]),
                                   _or_not_reached(theirs) if sb3_s else None, target=target,
                                   note="" if i else f"{reached}; {budget}; {n_seeds} seed(s){no_sb3}",
                                   # a time ratio reads as a speed-up: SB3's time over ours
                                   ratio_value=common.ratio(theirs, ours_s[k]), compare=bool(sb3_s)))
    return {"config": {"tasks": tasks, "torch_threads": threads, "device": device}, "results": results,
            "rows": rows}


def _or_not_reached(value: float | None) -> float | str:
    return "not reached" if value is None else value


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--tasks", default=",".join(TASKS), help=f"comma-separated subset of {', '.join(TASKS)}")
    p.add_argument("--seeds", type=int, default=None, help="seeds per task (default: 1 quick; 3 Pendulum, 1 cartpole)")
    for key in TASKS:
        p.add_argument(f"--{key}-overrides", default="", help=f"extra robot_rl overrides for {key}, space-separated")
    args = p.parse_args(argv)
    threads = common.setup(args)
    extra = {key: getattr(args, f"{key}_overrides").split() for key in TASKS}
    return common.finish(args, run(args.quick, threads, args.device, args.tasks.split(","), args.seeds, extra))


if __name__ == "__main__":
    main()
