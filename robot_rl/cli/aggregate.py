"""`robot-rl aggregate`: statistics over the runs of several seeds (what a seed list does after training)."""

from __future__ import annotations

from pathlib import Path

from robot_rl.cli.common import Command, page
from robot_rl.errors import UserError

KEYS = [
    "  out=<the first run's parent>   where seeds.json and curves.png go",
    "  metric=eval_return_mean        the metrics.csv column to aggregate (success_rate, ...)",
    "  title=<out's name>             title of curves.png",
]


def run(args: list[str]) -> int:
    """`robot-rl aggregate <run dir> ... [out=] [metric=] [title=]`."""
    from robot_rl.seeds import aggregate, describe

    options = dict(a.split("=", 1) for a in args if "=" in a)
    if unknown := set(options) - {"out", "metric", "title"}:
        raise UserError(f"unknown key '{sorted(unknown)[0]}' for aggregate; valid keys: out, metric, title")
    if not (dirs := [Path(a) for a in args if "=" not in a]):
        raise UserError("give the run directories to aggregate, e.g. robot-rl aggregate runs/x/seed_*")
    for d in dirs:
        if not (d / "metrics.csv").is_file():
            raise UserError(f"{d} has no metrics.csv: not a run directory")
    out = Path(options.get("out", dirs[0].parent))
    metric = options.get("metric", "eval_return_mean")
    summary = aggregate(dirs, out, title=options.get("title", out.name), metric=metric)
    print(describe(summary, metric), flush=True)
    print(f"statistics: {out / 'seeds.json'} | curves: {out / 'curves.png'}", flush=True)
    return 0


COMMAND = Command(
    name="aggregate", summary="statistics over the runs of several seeds", run=run,
    examples=["robot-rl aggregate runs/hopper/seed_* out=runs/hopper"],
    help=lambda _: page(["usage: robot-rl aggregate <run dir> <run dir> ... [key=value ...]"], [
        "Statistics over runs of several seeds (what `seed=0,1,2` does after training): mean and IQM of the metric",
        "at each evaluation step the runs share, with 95% bootstrap intervals (seeds.json), and curves with bands",
        "(curves.png).",
    ], COMMAND.examples, None) + "\nKeys (default):\n" + "\n".join(KEYS) + "\n",
)
