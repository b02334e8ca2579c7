"""Published reference learning curves (SimbaV2 and its SAC baseline) for the sample-efficiency benchmark.

The numbers live in published_curves.csv next to this file; README.md says where each one comes from.
SUITE_TASKS names issue 60's 13-task suite and normalised_score() puts a return on SimbaV2's 100k scale.
"""

from __future__ import annotations

import csv
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parent / "published_curves.csv"
COLUMNS = ("method", "task", "version", "env_step", "mean", "std", "seeds", "source")

# Issue 60's suite: reference task name -> env spec in bench/sample_efficiency.py's format. The gymnasium tasks
# run as -v5 there while the published curves are -v4 (README.md, *Versions*); the dm_control ones run at action
# repeat 2, 100k frames, the same unit as the published env_step.
SUITE_TASKS = {
    "ant": "gym:Ant-v5",
    "halfcheetah": "gym:HalfCheetah-v5",
    "hopper": "gym:Hopper-v5",
    "humanoid": "gym:Humanoid-v5",
    "walker2d": "gym:Walker2d-v5",
    "cheetah-run": "dmc:cheetah-run",
    "finger-spin": "dmc:finger-spin",
    "finger-turn_easy": "dmc:finger-turn_easy",
    "hopper-stand": "dmc:hopper-stand",
    "quadruped-walk": "dmc:quadruped-walk",
    "reacher-hard": "dmc:reacher-hard",
    "walker-run": "dmc:walker-run",
    "walker-stand": "dmc:walker-stand",
}
NORMALISE_STEP = 100_000


def load_reference(path: str | Path | None = None) -> dict[str, dict[str, list[tuple[int, float, float]]]]:
    """{task: {method: [(env_step, mean, std), ...]}} sorted by env_step, read from published_curves.csv.

    env_step counts simulator steps (frames): for dm_control tasks (action repeat 2) 100k env steps are
    50k agent decisions. std is the sample standard deviation across the published seeds.
    """
    path = DEFAULT_PATH if path is None else Path(path)
    curves: dict[str, dict[str, list[tuple[int, float, float]]]] = {}
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        missing = set(COLUMNS) - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{path}: missing columns {sorted(missing)}")
        for row in reader:
            point = (int(row["env_step"]), float(row["mean"]), float(row["std"]))
            curves.setdefault(row["task"], {}).setdefault(row["method"], []).append(point)
    for methods in curves.values():
        for series in methods.values():
            series.sort()
    return curves


def reference_labels(path: str | Path | None = None) -> dict[tuple[str, str], str]:
    """{(task, method): "method (published, version, N seeds)"}: the legend entry a plot gives each curve."""
    path = DEFAULT_PATH if path is None else Path(path)
    labels: dict[tuple[str, str], str] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            labels[(row["task"], row["method"])] = f"{row['method']} (published, {row['version']}, {row['seeds']} seeds)"
    return labels


def published_mean(task: str, method: str = "SimbaV2", env_step: int = NORMALISE_STEP,
                   path: str | Path | None = None) -> float:
    """The published mean return of `method` on `task` at `env_step` (a 10k grid point up to 100k)."""
    for step, mean, _ in load_reference(path).get(task, {}).get(method, []):
        if step == env_step:
            return mean
    raise KeyError(f"no published {method} mean for {task!r} at env_step {env_step}")


def published_seeds(task: str, method: str = "SimbaV2", env_step: int = NORMALISE_STEP,
                    path: str | Path | None = None) -> int:
    """How many seeds `method`'s published mean on `task` at `env_step` averages (SAC on dm_control: 2-3 only)."""
    path = DEFAULT_PATH if path is None else Path(path)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if (row["task"], row["method"], int(row["env_step"])) == (task, method, env_step):
                return int(row["seeds"])
    raise KeyError(f"no published {method} result for {task!r} at env_step {env_step}")


def normalised_score(task: str, value: float, path: str | Path | None = None) -> float:
    """`value` (a return on `task`) divided by SimbaV2's published mean return at 100k env steps.

    Returns differ in scale by orders of magnitude across the suite (Humanoid thousands, dm_control at most
    1,000), so issue 60 aggregates the tasks on one scale where SimbaV2 (update-to-data 2, 10 seeds) is 1.0 on
    every task: an IQM over normalised scores is then not dominated by the tasks with large returns. The
    denominator is always the 100k mean, whatever step `value` was measured at, so compare like with like.
    For gymnasium tasks the denominator is SimbaV2's -v4 result while the benchmark runs -v5.
    """
    return value / published_mean(task, "SimbaV2", NORMALISE_STEP, path)
