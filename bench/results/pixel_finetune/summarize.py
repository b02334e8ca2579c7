"""Summary of the residual runs on camera BC policies (run.sh): success at step 0 (the BC start, evaluated by the
run itself) and at the end, per seed and over seeds (mean, IQM, 95% bootstrap interval), plus the curves.
`summarize_residual` also summarises `../residual_push/` (the state task), which loads this file by path."""

from __future__ import annotations

import sys
from pathlib import Path

from robot_rl.stats import copy_run_files, load_curve, plot_curves, summarize, summarize_runs, write_json

HERE = Path(__file__).parent
ROOT = HERE.parent.parent.parent


def summarize_residual(runs_dir: Path, dest: Path, seeds: list[int], about: dict[str, str], title: str) -> dict:
    """Read `runs_dir/residual_s<seed>`, copy their small files to `dest`, write `dest/summary.json` (`about` first:
    what the runs are) and `dest/success.png`; returns the summary."""
    runs = [runs_dir / f"residual_s{s}" for s in seeds]
    curves = {s: load_curve(r, "success_rate") for s, r in zip(seeds, runs, strict=True)}
    start = {s: round(100 * c[0.0], 1) for s, c in curves.items()}
    end = {s: round(100 * c[max(c)], 1) for s, c in curves.items()}
    gain = {s: round(end[s] - start[s], 1) for s in seeds}
    for s, run in zip(seeds, runs, strict=True):  # the small files of each run (no checkpoints, no tensorboard)
        copy_run_files(run, dest / f"residual_s{s}", logs={"output.log": run.parent / f"residual_s{s}.log"})
    summary = {
        **about,
        "success_percent_start": start,
        "success_percent_end": end,
        "gain_points": gain,
        "summary_start": summarize(list(start.values())),
        "summary_end": summarize(list(end.values())),
        "summary_gain": summarize(list(gain.values())),
    }
    write_json(summary, dest / "summary.json")
    plot_curves({title: summarize_runs(runs, "success_rate")}, dest / "success.png", title=title,
                ylabel="success rate")
    print(summary["summary_start"], summary["summary_end"], summary["summary_gain"], sep="\n")
    return summary


def main(seeds: list[int]) -> None:
    summarize_residual(ROOT / "runs" / "pixel_finetune", HERE, seeds, {
        "task": "arm:push-sparse-pixels, two 48x48 cameras (front, wrist) + 7 proprioception numbers",
        "base": "flow BC policies of bench/results/pixel_bc/run.sh (same data, settings and seeds)",
        "method": "residual RL (experiment=residual_push_pixels): SAC correction, scale 0.1, n-step 3, reading the "
                  "base's frozen conditioning (state + camera features); 1 env, 1 update per env step",
        "steps": "env steps = agent steps (action repeat 1); 1,000 collection steps, 2,000 critic-only updates",
        "evaluation": "50 episodes (one per eval env), deterministic base + deterministic correction, every 10k env "
                      "steps, step 0 = the BC policy alone; the same 50 starts at every evaluation",
    }, "residual RL on pixel BC, push-sparse-pixels")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0, 1, 2])
