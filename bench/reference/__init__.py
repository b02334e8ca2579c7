"""Published reference learning curves (SimbaV2 and its SAC baseline) for the sample-efficiency benchmark.

The numbers live in published_curves.csv next to this file; README.md says where each one comes from.
"""

from __future__ import annotations

import csv
from pathlib import Path

DEFAULT_PATH = Path(__file__).resolve().parent / "published_curves.csv"
COLUMNS = ("method", "task", "version", "env_step", "mean", "std", "seeds", "source")


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
