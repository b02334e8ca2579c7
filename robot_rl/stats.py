"""Statistics over seeds: mean, interquartile mean and bootstrap confidence intervals, and curves with bands.

One seed is an anecdote. These are the figures every learning claim of the project states (Agarwal et al.
2021, "Deep RL at the edge of the statistical precipice"): the mean and the interquartile mean (IQM: the mean of
the middle 50% of runs, robust to one outlier seed and more efficient than the median) of the final score over
seeds, each with a 95% percentile-bootstrap confidence interval (runs resampled with replacement). Written here
with numpy (a few lines) rather than pulling in a plotting stack as a dependency.

`load_curve` reads `metrics.csv` of a run directory; `summarize_runs` aggregates runs at every evaluation step
they share; `plot_curves` draws one line per group (IQM or mean) with its confidence band; `copy_run_files` puts
a run's small files beside the summary that cites it.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

BOOTSTRAP_SAMPLES = 5000


def iqm(values: Sequence[float] | np.ndarray) -> float:
    """Interquartile mean: the mean of the values between the 25th and 75th percentile (ranks, with the
    boundary runs weighted fractionally so that it is defined for any count, e.g. 5 seeds -> 2.5 middle runs)."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = x.size
    if n == 0:
        return math.nan
    lo, hi = 0.25 * n, 0.75 * n  # the middle half of the sorted runs, as a continuous interval of rank mass
    weights = np.clip(np.minimum(np.arange(1, n + 1), hi) - np.maximum(np.arange(n), lo), 0.0, None)
    return float((weights * x).sum() / weights.sum())


def bootstrap_ci(
    values: Sequence[float] | np.ndarray,
    statistic: Callable[[np.ndarray], float],
    confidence: float = 0.95,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """Percentile-bootstrap interval of `statistic` over runs resampled with replacement (seeded: reproducible)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        return math.nan, math.nan
    if x.size == 1:
        return float(x[0]), float(x[0])
    rng = np.random.default_rng(seed)
    resampled = x[rng.integers(0, x.size, size=(samples, x.size))]
    stats = np.array([statistic(row) for row in resampled])
    alpha = (1.0 - confidence) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def summarize(values: Sequence[float] | np.ndarray, confidence: float = 0.95) -> dict:
    """{n, mean, mean_ci, iqm, iqm_ci, std, min, max, values} of one score per run."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=np.float64)
    if x.size == 0:
        return {"n": 0, "mean": None, "mean_ci": None, "iqm": None, "iqm_ci": None, "std": None, "min": None,
                "max": None, "values": []}
    return {
        "n": int(x.size),
        "mean": float(x.mean()),
        "mean_ci": list(bootstrap_ci(x, np.mean, confidence)),
        "iqm": iqm(x),
        "iqm_ci": list(bootstrap_ci(x, iqm, confidence)),
        "std": float(x.std(ddof=1)) if x.size > 1 else 0.0,
        "min": float(x.min()),
        "max": float(x.max()),
        "values": [float(v) for v in x],
    }


def format_summary(s: dict, digits: int = 0) -> str:
    """'IQM 2,512 [1,980, 2,830], mean 2,401 [1,900, 2,800] (5 seeds)': one line for tables and notes."""
    if not s["n"]:
        return "no runs"
    f = f"{{:,.{digits}f}}"
    iqm_ci = ", ".join(f.format(v) for v in s["iqm_ci"])
    mean_ci = ", ".join(f.format(v) for v in s["mean_ci"])
    seeds = "1 seed: an anecdote" if s["n"] == 1 else f"{s['n']} seeds"
    return f"IQM {f.format(s['iqm'])} [{iqm_ci}], mean {f.format(s['mean'])} [{mean_ci}] ({seeds})"


def load_curve(
    run_dir: str | Path, metric: str = "eval_return_mean", x: str = "env_step", file: str = "metrics.csv"
) -> dict[float, float]:
    """{x: metric} from a run directory's metrics.csv, or another of its logs such as offline pretraining's
    offline_metrics.csv (rows without the metric are skipped)."""
    path = Path(run_dir) / file
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: is {run_dir} a run directory?")
    curve: dict[float, float] = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            if row.get(metric) not in (None, "") and row.get(x) not in (None, ""):
                curve[float(row[x])] = float(row[metric])
    return curve


def summarize_runs(
    run_dirs: Sequence[str | Path], metric: str = "eval_return_mean", x: str = "env_step"
) -> dict:
    """Aggregate runs of one configuration over seeds: per shared step and at the last shared step ("final")."""
    curves = [load_curve(d, metric, x) for d in run_dirs]
    shared = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
    per_step = [{x: s, **summarize([c[s] for c in curves])} for s in shared]
    return {
        "metric": metric,
        "x": x,
        "runs": [str(d) for d in run_dirs],
        "curve": per_step,
        "final": per_step[-1] if per_step else summarize([]),
    }


def plot_curves(
    groups: dict[str, dict], out: str | Path, title: str = "", ylabel: str = "evaluation return",
    references: dict[str, list[tuple[float, float, float]]] | None = None,
) -> Path:
    """One IQM line with its 95% bootstrap band per group (`summarize_runs` results); `references` adds
    published curves as dashed lines: {label: [(x, mean, std), ...]} with a +-std band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, summary in groups.items():
        pts = [p for p in summary["curve"] if p["n"]]
        if not pts:
            continue
        xs = [p[summary["x"]] for p in pts]
        (line,) = ax.plot(xs, [p["iqm"] for p in pts], label=f"{label} (IQM, n={pts[-1]['n']})")
        ax.fill_between(xs, [p["iqm_ci"][0] for p in pts], [p["iqm_ci"][1] for p in pts], alpha=0.2,
                        color=line.get_color())
    for label, points in (references or {}).items():
        xs, means, stds = zip(*points, strict=True)
        (line,) = ax.plot(xs, means, linestyle="--", label=label)
        ax.fill_between(xs, np.subtract(means, stds), np.add(means, stds), alpha=0.08, color=line.get_color())
    ax.set_xlabel(next(iter(groups.values()))["x"].replace("_", " ") if groups else "env step")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return save_figure(fig, out)


def save_figure(fig, out: str | Path) -> Path:  # noqa: ANN001  a matplotlib Figure (matplotlib is imported lazily)
    """Lay out `fig`, write it to `out` (its folder made) at the project's plot resolution, and close it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


RUN_FILES = ("config.yaml", "metrics.csv", "learning_curve.png")


def copy_run_files(run_dir: str | Path, dest: str | Path, files: Sequence[str] = RUN_FILES,
                   logs: dict[str, str | Path] | None = None) -> Path:
    """Copy the small files of a run (`files`, those it has; never checkpoints or tensorboard logs) into `dest`, to
    be committed beside the summary that cites the run; `logs` adds files kept outside the run directory, such as
    its console log: {name in dest: path}."""
    run_dir, dest = Path(run_dir), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in files:
        if (run_dir / name).is_file():
            shutil.copy2(run_dir / name, dest / name)
    for name, path in (logs or {}).items():
        if Path(path).is_file():
            shutil.copy2(path, dest / name)
    return dest


def write_json(obj: dict, path: str | Path) -> Path:
    """Write atomically (temp file then rename): a results file is never half-written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    tmp.replace(path)
    return path
