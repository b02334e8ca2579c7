"""`robot-rl bc`: behaviour cloning of a chunked policy (MLP, diffusion, flow) from a dataset."""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from robot_rl.cli.common import Command, check_env_spec, default_run_dir, parse_args
from robot_rl.errors import UserError


def run(args: list[str]) -> int:
    from robot_rl.bc import BCConfig, train_bc

    check_env_spec(args, "bc")
    cfg: BCConfig = parse_args(BCConfig, args, "bc")
    cfg.validate()
    if not Path(cfg.dataset).is_dir():
        raise UserError(f"dataset {cfg.dataset} does not exist (record one with robot-rl collect)")
    if not cfg.run_dir:
        cfg.run_dir = str(default_run_dir(f"bc-{cfg.policy}"))
    summary = train_bc(cfg, message=lambda s: print(s, flush=True))
    line = (
        f"done: {cfg.policy} policy, {cfg.steps:,} steps in {summary['train_time_s']:.0f}s | "
        f"loss {summary['first_loss']:.4f} -> {summary['final_loss']:.4f}"
    )
    ev = summary["eval"]
    if ev is not None:
        line += f" | {cfg.env.spec}: return {ev['return_mean']:.2f}"
        if ev["success_rate"] is not None:
            line += f", success rate {ev['success_rate']:.0%}"
    print(f"{line} | policy in {summary['policy_dir']}", flush=True)
    return 0


COMMAND = Command(
    name="bc", summary="behaviour cloning from a dataset (mlp, diffusion, flow)", run=run,
    schema=lambda: import_module("robot_rl.bc").BCConfig,
    usage=["usage: robot-rl bc dataset=<dataset dir> policy=mlp|diffusion|flow [key=value ...]"],
    about=[
        "Behaviour cloning of a chunked policy from a dataset (robot-rl collect writes one): trains on",
        "(observation, action chunk) pairs, writes <run_dir>/policy/{model.safetensors,config.json} (load it with",
        "policies.io.load_policy), metrics.csv, tensorboard/, learning_curve.png (the loss) and bc_config.json, and",
        "with env.spec= runs evaluation episodes; evaluate the policy later with robot-rl eval policy=<run_dir>/policy.",
    ],
    examples=[
        "robot-rl bc dataset=data/push_demos policy=diffusion env.spec=arm:push",
        "robot-rl bc dataset=data/push_demos policy=flow num_inference_steps=4 steps=5000 run_dir=runs/flow_push",
        "robot-rl bc dataset=data/push_demos policy=mlp gaussian=true horizon=4 execute=2",
    ],
)
