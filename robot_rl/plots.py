"""The learning-curve PNG of a run."""

from __future__ import annotations

from pathlib import Path

from robot_rl.logger import read_metrics


def plot_learning_curve(csv_path: Path, png_path: Path, title: str = "") -> None:
    """Evaluation return (mean ± std) and success rate, where defined, against environment steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(csv_path) if r.get("eval_return_mean") is not None]
    if not rows:
        return
    steps = [r["env_step"] for r in rows]
    mean = [r["eval_return_mean"] for r in rows]
    std = [r["eval_return_std"] or 0.0 for r in rows]
    has_success = any(r.get("success_rate") is not None for r in rows)
    fig, axes = plt.subplots(1, 2 if has_success else 1, figsize=(10 if has_success else 6, 4), squeeze=False)
    ax = axes[0, 0]
    ax.plot(steps, mean, marker="o", ms=3)
    low = [m - s for m, s in zip(mean, std, strict=True)]
    high = [m + s for m, s in zip(mean, std, strict=True)]
    ax.fill_between(steps, low, high, alpha=0.25)
    ax.set_xlabel("environment steps")
    ax.set_ylabel("evaluation return")
    ax.grid(alpha=0.3)
    if has_success:
        ax2 = axes[0, 1]
        ax2.plot(steps, [r.get("success_rate") or 0.0 for r in rows], marker="o", ms=3, color="tab:green")
        ax2.set_xlabel("environment steps")
        ax2.set_ylabel("success rate")
        ax2.set_ylim(-0.05, 1.05)
        ax2.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    tmp = png_path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=100)
    plt.close(fig)
    tmp.replace(png_path)


def plot_comparison(
    runs: dict[str, Path],
    png_path: Path,
    title: str = "",
    metric: str | None = None,
    x: str = "env_step",
    logx: bool = False,
) -> str:
    """One curve per run (label -> run directory) of `metric` against `x` (environment steps, or wall_time_s),
    e.g. WSRL against naive fine-tuning and RLPD: `python -m robot_rl.plots out.png wsrl=runs/a naive=runs/b`.
    `logx` puts x on a log scale (linear below the first positive x, so the starting point at 0 stays): for
    runs whose budgets differ by orders of magnitude, as SAC-based and PPO-based fine-tuning do.

    `metric` None: `success_rate` where a run has it, else `eval_return_mean`. A metric no run has is a
    ValueError naming the columns they have (rather than a blank plot). Returns the metric plotted."""
    for label, run_dir in runs.items():
        if not (Path(run_dir) / "metrics.csv").is_file():
            what = "does not exist" if not Path(run_dir).exists() else "has no metrics.csv: not a run directory"
            raise ValueError(f"{label}={run_dir}: {what}")
    tables = {label: read_metrics(Path(run_dir) / "metrics.csv") for label, run_dir in runs.items()}

    def present(name: str) -> bool:
        return any(r.get(name) is not None for rows in tables.values() for r in rows)

    if metric is None:
        metric = "success_rate" if present("success_rate") else "eval_return_mean"
    if not present(metric):
        have = sorted({k for rows in tables.values() for r in rows for k, v in r.items() if v is not None})
        raise ValueError(f"no run has values of {metric!r}; columns with values: {', '.join(have)}")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for label, table in tables.items():
        rows = [r for r in table if r.get(metric) is not None]
        ax.plot([r[x] for r in rows], [r[metric] for r in rows], marker="o", ms=3, label=label)
    if logx:
        positive = [v for line in ax.get_lines() for v in line.get_xdata() if v > 0]
        ax.set_xscale("symlog", linthresh=min(positive, default=1.0))
    ax.set_xlabel("online environment steps" if x == "env_step" else x.replace("_", " "))
    ax.set_ylabel(metric.replace("_", " "))
    if metric == "success_rate":
        ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title(title)
    fig.tight_layout()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png_path, dpi=100)
    plt.close(fig)
    return metric


def plot_loss_curve(csv_path: Path, png_path: Path, title: str = "") -> None:
    """A behaviour-cloning run's training loss against gradient steps (log scale: BC losses fall by decades)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_metrics(csv_path) if r.get("loss") is not None]
    if not rows:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot([r["step"] for r in rows], [r["loss"] for r in rows])
    if min(r["loss"] for r in rows) > 0:
        ax.set_yscale("log")
    ax.set_xlabel("gradient step")
    ax.set_ylabel("training loss")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(png_path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m robot_rl.plots", description="compare runs' metrics.csv")
    parser.add_argument("out", type=Path, help="output PNG")
    parser.add_argument("runs", nargs="+", help="<label>=<run dir>")
    parser.add_argument("--metric", default=None,
                        help="column to plot (default: success_rate where the runs have it, else eval_return_mean)")
    parser.add_argument("--x", default="env_step", help="x axis column: env_step or wall_time_s")
    parser.add_argument("--title", default="")
    parser.add_argument("--logx", action="store_true", help="log-scaled x axis (budgets of different magnitudes)")
    args = parser.parse_args()
    if any("=" not in r for r in args.runs):
        parser.error("runs are <label>=<run dir>")
    try:
        plot_comparison(dict(r.split("=", 1) for r in args.runs), args.out, args.title, args.metric, args.x, args.logx)
    except ValueError as e:  # one line, without the usage text: the arguments were well formed
        import sys

        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        sys.exit(2)
