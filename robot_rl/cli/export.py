"""`robot-rl export`: any run (SAC, BC, residual, DSRL, ReinFlow, DPPO) as a policy directory, optionally ONNX."""

from __future__ import annotations

from dataclasses import dataclass

from robot_rl.cli.common import Command, parse_args
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help

EXPORT_FORMATS = ("policy", "onnx")


@dataclass
class ExportArgs:
    run: str = _help("", "required: a run directory, a checkpoint file (.pt) or a policy directory")
    out: str = _help("", "required: the policy directory to write (an existing one is replaced; nothing else is)")
    format: str = _help("policy", "policy: safetensors + config.json; onnx: also policy.onnx (needs the export extra)")


def run(args: list[str]) -> int:
    from robot_rl.export import export

    a: ExportArgs = parse_args(ExportArgs, args, "export")
    if not a.run or not a.out:
        raise UserError("export needs run=<run dir, checkpoint or policy dir> and out=<dir>")
    if a.format not in EXPORT_FORMATS:
        raise UserError(f"format must be one of {', '.join(EXPORT_FORMATS)}, not '{a.format}'")
    out = export(a.run, a.out, onnx=a.format == "onnx")
    what = "policy directory and policy.onnx" if a.format == "onnx" else "policy directory"
    print(f"exported {a.run} -> {out} ({what})", flush=True)
    return 0


COMMAND = Command(
    name="export", summary="any run as a policy directory (optionally ONNX)", run=run, schema=lambda: ExportArgs,
    usage=["usage: robot-rl export run=<run dir | checkpoint.pt | policy dir> out=<dir> [format=policy|onnx]"],
    about=[
        "Writes the run's evaluation policy as a policy directory (model.safetensors + config.json), loadable",
        "without training code by eval policy=, deploy checkpoint=, Agent.load and robot_rl.policies.io.load_policy:",
        "SAC runs (any agent preset; the actor's tanh(mean), with its observation normalisation; from cameras",
        "with the encoders too), BC, residual RL (base + correction), DSRL (noise actor + base), ReinFlow and DPPO.",
        "The weights come from the run's policy/ directory if it has one, else checkpoints/best.pt, else latest.pt.",
        "format=onnx also writes policy.onnx: raw observations (camera policies: state and each camera group's",
        "uint8 image; diffusion, flow and DSRL: also the latent noise) in, the action or action chunk in [-1, 1]",
        "out; config.json's metadata.onnx names the inputs and outputs (docs/python-api.md). deploy runs camera",
        "policies on a robot that serves those cameras (serve-robot pixels=true).",
    ],
    examples=["robot-rl export run=runs/<run dir> out=exported/<name> format=onnx"],
)
