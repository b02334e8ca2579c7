"""When does each run's policy leave its near-uniform start, and what does it score?

On the tasks where the default agent lags (hopper-stand, quadruped-walk, finger-turn_easy), the policy's entropy
stays near its maximum for tens of thousands of agent steps while the temperature decays; the variants that lift
those tasks leave that plateau earlier. This reads each run's metrics.csv (written by every robot_rl run) and prints,
per task, variant and seed: the first logged agent step where the entropy is below half of its first logged value
(the plateau left), the temperature there, and the last evaluation's return.

    .venv/bin/python bench/results/sample_efficiency/entropy_plateau.py [variant folder ...]

Without arguments it compares the default (bench/results/sample_efficiency) with every
bench/results/sample_efficiency_<variant> folder beside it. Writes entropy_plateau.txt beside this file.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
sys.path.insert(0, str(RESULTS.parent.parent))  # the repository root, for bench.sample_efficiency

from bench.sample_efficiency import TASKS, finished  # noqa: E402


def plateau_exit(metrics: Path) -> tuple[int | None, float | None, float | None]:
    """(agent step where entropy < half its first value, temperature there, last evaluation return)."""
    rows = list(csv.DictReader(metrics.open()))
    logged = [r for r in rows if r.get("entropy")]
    evals = [r for r in rows if r.get("eval_return_mean")]
    last_return = float(evals[-1]["eval_return_mean"]) if evals else None
    if not logged:
        return None, None, last_return
    start = float(logged[0]["entropy"])
    for r in logged:
        if float(r["entropy"]) < 0.5 * start:
            return int(float(r["env_step"])), float(r["temperature"]), last_return
    return None, None, last_return


def main(folders: list[Path]) -> str:
    lines = ["task | variant | seed | agent step the plateau is left | temperature there | final return"]
    tasks = sorted({p.name for f in folders for p in f.iterdir() if (p / "ours").is_dir()})
    for task in tasks:
        for folder in folders:
            for run in sorted((folder / task / "ours").glob("seed_*")):
                metrics = run / "metrics.csv"
                if task not in TASKS or not finished(run, TASKS[task]):
                    continue
                step, temperature, final = plateau_exit(metrics)
                variant = folder.name.removeprefix("sample_efficiency").lstrip("_") or "default"
                left = f"{step:,}" if step is not None else "never"
                temp = f"{temperature:.4f}" if temperature is not None else "-"
                ret = f"{final:.0f}" if final is not None else "-"
                lines.append(f"{task} | {variant} | {run.name.removeprefix('seed_')} | {left} | {temp} | {ret}")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    chosen = [Path(a) for a in sys.argv[1:]] or [RESULTS / "sample_efficiency"] + sorted(
        p for p in RESULTS.glob("sample_efficiency_*") if p.is_dir())
    text = main(chosen)
    print(text, end="")
    if not sys.argv[1:]:
        (HERE / "entropy_plateau.txt").write_text(text)
