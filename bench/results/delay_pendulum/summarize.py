"""Final and best evaluation return per seed of each variant of run.sh, with mean and a 95% bootstrap interval over
seeds (robot_rl.stats); copies each run's small files (config, metrics) beside summary.json."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import numpy as np

from robot_rl.stats import bootstrap_ci, copy_run_files

HERE = Path(__file__).resolve().parent


def main(root: str) -> None:
    summary = {}
    for variant in ("nodelay", "naive", "aware"):
        finals, bests = [], []
        for seed_dir in sorted(Path(root, variant).glob("seed_*")):
            rows = list(csv.DictReader(open(seed_dir / "metrics.csv")))
            returns = [float(r["eval_return_mean"]) for r in rows if r.get("eval_return_mean")]
            finals.append(returns[-1])
            bests.append(max(returns))
            copy_run_files(seed_dir, HERE / variant / seed_dir.name)
        low, high = bootstrap_ci(finals, np.mean)
        summary[variant] = {"final_return": finals, "final_mean": sum(finals) / len(finals), "final_ci95": [low, high],
                            "best_return": bests, "env_steps": int(rows[-1]["env_step"])}
        print(f"{variant:8s} final {summary[variant]['final_mean']:8.1f} [{low:.1f}, {high:.1f}]  per seed "
              f"{', '.join(f'{v:.1f}' for v in finals)}")
    (HERE / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "/tmp/delaycmp")
