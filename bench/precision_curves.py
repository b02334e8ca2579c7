"""Do bf16 autocast and torch.compile learn as well as fp32 eager? Pendulum-v1 learning curves, same seeds.

The speed issue keeps bf16 only if it learns as well, and peers have had torch.compile silently break
convergence: this runs `experiment=pendulum` for each variant and seed, and writes the curves (return against
env steps and against training time, evaluation excluded) to a JSON file and a PNG beside it.

    python -m bench.precision_curves --seeds 0 1 --steps 10000 --variants fp32 bf16 compile
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

from bench import common
from robot_rl.config import compose_train_config

VARIANTS = {"fp32": [], "bf16": ["agent.optimiser.bf16=true"], "compile": ["agent.optimiser.compile=true"]}


def run(variant: str, seed: int, steps: int, threads: int) -> dict[str, Any]:
    cfg = compose_train_config([
        "experiment=pendulum", *VARIANTS[variant], f"seed={seed}", f"threads={threads}", f"train.steps={steps}",
        f"train.checkpoint_every={common.NEVER}", "train.video=false", "quiet=true",
    ])
    with tempfile.TemporaryDirectory(prefix="bench-precision-") as run_dir:
        trainer = common.run_trainer(common.TimedTrainer(cfg, Path(run_dir)))
    return {"variant": variant, "seed": seed, "curve": trainer.curve}


def plot(results: list[dict[str, Any]], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {"fp32": "tab:blue", "bf16": "tab:orange", "compile": "tab:green"}
    for r in results:
        steps = [p["env_step"] for p in r["curve"]]
        returns = [p["return"] for p in r["curve"]]
        label = f"{r['variant']} seed {r['seed']}"
        axes[0].plot(steps, returns, color=colors[r["variant"]], alpha=0.8, label=label)
        axes[1].plot([p["train_s"] for p in r["curve"]], returns, color=colors[r["variant"]], alpha=0.8)
    axes[0].set_xlabel("environment steps")
    axes[1].set_xlabel("training time, s (evaluation excluded)")
    for ax in axes:
        ax.set_ylabel("evaluation return")
        ax.axhline(-200, color="grey", ls=":", lw=1)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle("Pendulum-v1, SAC (experiment=pendulum): fp32 vs bf16 autocast vs torch.compile")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--variants", nargs="+", default=["fp32", "bf16"], choices=sorted(VARIANTS))
    p.add_argument("--out", type=Path, default=common.results_path("precision-curves"))
    args = p.parse_args(argv)
    results = [run(v, s, args.steps, args.threads) for s in args.seeds for v in args.variants]
    summary = []
    for r in results:
        final = r["curve"][-1]
        summary.append({"variant": r["variant"], "seed": r["seed"], "final_return": round(final["return"], 1),
                        "best_return": round(max(q["return"] for q in r["curve"]), 1),
                        "train_s": final["train_s"]})
        print(summary[-1], flush=True)
    common.write_json(args.out, {"machine": common.machine_info(args.threads, "cpu"), "steps": args.steps,
                                 "results": results, "summary": summary})
    plot(results, args.out.with_suffix(".png"))
    print(f"wrote {args.out} and {args.out.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
