"""Summary of run.sh's residual runs on state-based push (flow BC start at step 0, the end, the gain; per seed and
over seeds with mean, IQM and 95% bootstrap intervals; curves with bands), through `../pixel_finetune/summarize.py`'s
`summarize_residual`, loaded by path (its module name is this script's own). Also records each seed's BC policy's
own evaluation (its `robot-rl bc` log)."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent.parent


def _pixel_summary():
    spec = importlib.util.spec_from_file_location("pixel_finetune_summarize", HERE.parent / "pixel_finetune" /
                                                  "summarize.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(seeds: list[int]) -> None:
    runs = ROOT / "runs" / "residual_push"
    bc = {}
    for s in seeds:  # "... arm:push-sparse: return 0.54, success rate 54% | policy in ..."
        log = (runs / f"bc_flow_s{s}.log").read_text()
        bc[s] = float(re.findall(r"success rate (\d+)%", log)[-1])
        (HERE / f"bc_flow_s{s}.log").write_text(log)
    _pixel_summary().summarize_residual(runs, HERE, seeds, {
        "task": "arm:push-sparse (state, 29 numbers), sparse reward, episode ends at success",
        "base": "flow BC (robot-rl bc policy=flow num_inference_steps=4, 2,000 steps) on 50 noisy-expert demos "
                "(noise 0.3, data seed 100), one BC policy per seed (bc seed = run seed)",
        "base_own_evaluation_percent": bc,
        "method": "residual RL (experiment=residual_push): SAC correction, scale 0.1, n-step 3, actor lr 1e-4, "
                  "LayerNorm; 1 env, 1 update per env step; 1,000 collection steps, 2,000 critic-only updates",
        "steps": "60k env steps = agent steps (action repeat 1)",
        "evaluation": "100 episodes (one per eval env), deterministic base + deterministic correction, every 5k env "
                      "steps, step 0 = the BC policy alone; the same 100 starts at every evaluation",
    }, "residual RL on flow BC, push-sparse")


if __name__ == "__main__":
    main([int(s) for s in sys.argv[1:]] or [0, 1, 2])
