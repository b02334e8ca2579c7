"""`robot-rl distill`: a flow or diffusion policy distilled into a one-step flow policy (RL-100's distillation)."""

from __future__ import annotations

from importlib import import_module

from robot_rl.cli.common import Command, check_env_spec, parse_args


def run(args: list[str]) -> int:
    from robot_rl.distill import DistillConfig, distill

    check_env_spec(args, "distill")
    cfg: DistillConfig = parse_args(DistillConfig, args, "distill")
    cfg.validate()
    s = distill(cfg, message=lambda line: print(line, flush=True))
    line = (f"done: one-step student of a {s['teacher_steps']}-step teacher, {cfg.steps:,} steps in "
            f"{s['train_time_s']:.0f}s | loss {s['first_loss']:.5f} -> {s['final_loss']:.5f}")
    if s["latency"]:
        line += f" | {s['latency']['speedup_median']:.1f}x faster per chunk"
    if s["eval"]:
        rates = {k: v["success_rate"] for k, v in s["eval"].items()}
        if None in rates.values():
            line += " | return teacher {:.2f}, student {:.2f}".format(
                s["eval"]["teacher"]["return_mean"], s["eval"]["student"]["return_mean"])
        else:
            line += f" | success teacher {rates['teacher']:.0%}, student {rates['student']:.0%}"
    print(f"{line} | policy in {s['policy_dir']}", flush=True)
    return 0


COMMAND = Command(
    name="distill", summary="a flow or diffusion policy distilled into a one-step policy", run=run,
    schema=lambda: import_module("robot_rl.distill").DistillConfig,
    usage=["usage: robot-rl distill teacher=<policy dir> dataset=<dataset dir> [key=value ...]"],
    about=[
        "Trains a one-step flow policy to land, in one network call, where the teacher's full sampling chain",
        "lands from the same noise (the teacher: robot-rl bc policy=flow|diffusion, or a fine-tuned one), on the",
        "dataset's observations. Writes <run_dir>/policy (loads, deploys and exports to ONNX as any policy),",
        "metrics.csv, learning_curve.png and distill_summary.json: both policies' latency per chunk at batch 1 and,",
        "with env.spec=, both policies' success on the same evaluation episodes.",
    ],
    examples=[
        "robot-rl distill teacher=runs/flow_push/policy dataset=data/push_demos env.spec=arm:push-sparse",
        "robot-rl distill teacher=runs/diffusion_push/policy dataset=data/push_demos steps=5000 teacher_steps=20",
    ],
)
