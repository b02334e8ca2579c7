"""`robot-rl` command line: `train`, `finetune`, `eval`, `collect`, `bc`, `export`, `classifier`, and the robot commands
(`serve-robot`, `teleop`, `hil-train`, `deploy`, in `robot_rl.hil.cli`).

Every command takes `key=value` settings (`train` and `finetune` also `group=preset`: Hydra overrides), and
`robot-rl <command> --help` lists each key with its default. `device=` is always a torch device; `env.spec=` is
always an environment spec. User mistakes end with one line on stderr and exit status 2; no stack trace.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from robot_rl.fields import help_field as _help

if TYPE_CHECKING:
    from robot_rl.agents.sac import SACConfig

os.environ.setdefault("MUJOCO_GL", "egl")

USAGE = """\
usage: robot-rl <command> [key=value ...]    (or python -m robot_rl <command> ...; robot-rl --version)

Commands:
  train     train an agent:              robot-rl train env.spec=dmc:cartpole-swingup agent.utd=4 seed=3
  finetune  fine-tune a BC policy:       robot-rl finetune method=residual base_policy=runs/<bc run>/policy env.spec=arm:push-sparse
            or offline-to-online RL:     robot-rl finetune experiment=wsrl_push
  eval      evaluate a run's policy:     robot-rl eval run=runs/<run dir> [episodes=10] [checkpoint=best|latest]
            or a saved policy:           robot-rl eval policy=runs/<run>/policy env.spec=arm:push-sparse [episodes=100]
  collect   record episodes to a dataset: robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 out=data/push
  bc        behaviour cloning from data:  robot-rl bc dataset=data/push policy=mlp|diffusion|flow [env.spec=arm:push]
  aggregate statistics over seeds:       robot-rl aggregate runs/a runs/b ... [out=runs/a_b] [metric=eval_return_mean]
  export    any run as a policy dir:     robot-rl export run=runs/<run dir> out=exported/<name> [format=onnx]
  classifier learned success reward:     robot-rl classifier dataset=data/push_cams out=classifiers/push [steps=2000]

Several seeds: `robot-rl train|finetune ... seed=0,1,2,3,4 jobs=2` trains each seed in <run_dir>/seed_<s>, then
writes the mean and IQM over seeds with 95% bootstrap intervals (seeds.json) and curves with bands (curves.png).

Robot commands (see docs/hardware.md):
  serve-robot  serve a robot driver:      robot-rl serve-robot driver=sim_arm task=reach  (token: $ROBOT_RL_TOKEN)
  teleop       drive it, record demos:    robot-rl teleop robot=127.0.0.1:50051 teleop=keyboard out=data/demos
  hil-train    learn with interventions:  robot-rl hil-train robot=127.0.0.1:50051 teleop=scripted device=cpu
  deploy       run a checkpoint safely:   robot-rl deploy robot=127.0.0.1:50051 checkpoint=runs/<run>

`robot-rl <command> --help` lists every key that can be set, with its default. Booleans are key=true|false.
device= is the torch device everywhere (teleop= is the operator's device); env.spec= is the environment spec.
"""


def version_line() -> str:
    """`robot-rl --version`: ours and the versions that decide numerics (read from metadata, nothing imported)."""
    import platform
    from importlib import metadata

    from robot_rl import __version__

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    deps = ", ".join(f"{name} {installed(name)}" for name in ("torch", "mujoco", "gymnasium", "dm-control"))
    return f"robot-rl {__version__} (Python {platform.python_version()}; {deps})"


class UserError(Exception):
    """Printed as one line, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(USAGE, end="")
        return 0
    if argv[0] in {"--version", "-V", "version"}:
        print(version_line())
        return 0
    command, args = argv[0], argv[1:]
    if command in ROBOT_COMMANDS:
        return _robot_command(command, args)
    commands = {
        "train": _train, "finetune": _finetune, "eval": _eval, "collect": _collect, "bc": _bc, "aggregate": _aggregate,
        "export": _export, "classifier": _classifier,
    }
    helps = {
        "train": lambda: _train_help(settings=[a for a in args if a not in {"-h", "--help"}]),
        "finetune": _finetune_help,
        "eval": _eval_help,
        "collect": _collect_help,
        "bc": _bc_help,
        "aggregate": _aggregate_help,
        "export": _export_help,
        "classifier": _classifier_help,
    }
    if command not in commands:
        everything = [*commands, *ROBOT_COMMANDS]
        return _fail(f"unknown command '{command}'; choose one of: {', '.join(everything)}")
    if any(a in {"-h", "--help"} for a in args):
        print(helps[command](), end="")
        return 0
    from robot_rl.bc import BCError
    from robot_rl.checkpoint import CheckpointError
    from robot_rl.classifier import ClassifierError
    from robot_rl.config import ConfigError
    from robot_rl.datasets import DatasetError
    from robot_rl.device import DeviceError, check_torch_device
    from robot_rl.envs import UnknownEnvError
    from robot_rl.export import ExportError
    from robot_rl.finetune import FinetuneError
    from robot_rl.policies.io import PolicyFormatError
    from robot_rl.replay import ReplayMemoryError
    from robot_rl.seeds import SeedsError, split_seed_overrides

    try:
        for a in args:
            if a.partition("=")[0] == "device":
                check_torch_device(a.partition("=")[2])
        if command in {"collect", "eval", "bc"}:
            _check_env_spec(args, command)
        if command == "finetune":
            args = _finetune_steps(args)
        seeds, jobs, rest = split_seed_overrides(args) if command in {"train", "finetune"} else (None, 1, args)
        if seeds is not None:
            return _seeds(command, rest, seeds, jobs)
        return commands[command](args)
    except (
        UserError,
        ConfigError,
        UnknownEnvError,
        CheckpointError,
        DatasetError,
        BCError,
        PolicyFormatError,
        FinetuneError,
        SeedsError,
        ReplayMemoryError,
        DeviceError,
        ExportError,
        ClassifierError,
    ) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130


def _seeds(command: str, overrides: list[str], seeds: list[int], jobs: int) -> int:
    """Several seeds of one configuration (robot_rl.seeds): validate once here, then one process per seed."""
    from robot_rl.config import compose_config, compose_train_config
    from robot_rl.seeds import describe, run_seeds

    _check_overrides(overrides)
    if any(o.startswith("resume=") for o in overrides):
        raise UserError("with a seed list, run the same command again to continue (not resume=)")
    if command == "finetune" and _fine_tunes_a_policy(overrides):
        from robot_rl.finetune.config import FinetuneConfig

        composed = [f"finetune={o.split('=', 1)[1]}" if o.startswith("experiment=") else o for o in overrides]
        fcfg = compose_config("finetune", FinetuneConfig, composed)
        steps, name, run_dir = fcfg.steps, fcfg.name or f"{fcfg.method}-{_slug(fcfg.env.spec)}", fcfg.run_dir
    else:
        cfg = compose_train_config(overrides)
        cfg.validate()
        steps, name, run_dir = cfg.train.steps, cfg.name or _slug(cfg.env.spec), cfg.run_dir
    base = Path(run_dir) if run_dir else _default_run_dir(f"{name}-seeds")
    rest = [o for o in overrides if not o.startswith("run_dir=")]
    summary = run_seeds(command, rest, seeds, jobs, base, steps)
    print(describe(summary), flush=True)
    print(f"statistics: {base / 'seeds.json'} | curves: {base / 'curves.png'}", flush=True)
    return 1 if summary["failed_seeds"] else 0


def _aggregate_help() -> str:
    return "\n".join([
        "usage: robot-rl aggregate <run dir> <run dir> ... [key=value ...]",
        "",
        "Statistics over runs of several seeds (what `seed=0,1,2` does after training): mean and IQM of the metric",
        "at each evaluation step the runs share, with 95% bootstrap intervals (seeds.json), and curves with bands",
        "(curves.png).",
        "",
        "Example:",
        "  robot-rl aggregate runs/hopper/seed_* out=runs/hopper",
        "",
        "Keys (default):",
        "  out=<the first run's parent>   where seeds.json and curves.png go",
        "  metric=eval_return_mean        the metrics.csv column to aggregate (success_rate, ...)",
        "  title=<out's name>             title of curves.png",
    ]) + "\n"


def _aggregate(args: list[str]) -> int:
    from robot_rl.seeds import aggregate, describe

    options = dict(a.split("=", 1) for a in args if "=" in a)
    unknown = set(options) - {"out", "metric", "title"}
    if unknown:
        raise UserError(f"unknown key '{sorted(unknown)[0]}' for aggregate; valid keys: out, metric, title")
    dirs = [Path(a) for a in args if "=" not in a]
    if not dirs:
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


ROBOT_COMMANDS = ("serve-robot", "teleop", "hil-train", "deploy")


def _robot_command(command: str, args: list[str]) -> int:
    if (missing := _bridge_packages_missing()) is not None:
        return _fail(f"{command} needs the robot bridge's packages ({missing}), an extra of the simulation install: "
                     f"pip install -c constraints.txt -e '.[robot]'  (or pip install 'robot-rl[robot]')")
    from robot_rl.checkpoint import CheckpointError
    from robot_rl.datasets import DatasetError
    from robot_rl.device import DeviceError
    from robot_rl.hil.cli import COMMANDS, CommandError, check_ranges, help_text
    from robot_rl.real.client import BridgeError

    if any(a in {"-h", "--help"} for a in args):
        print(help_text(command), end="")
        return 0
    keys, run, _ = COMMANDS[command]
    try:
        _check_old_flags(args, command, keys())
        parsed = _parse_args(keys(), args, command)
        check_ranges(parsed)
        return run(parsed)
    except (UserError, CommandError, BridgeError, CheckpointError, DatasetError, DeviceError) as e:
        return _fail(str(e))
    except KeyboardInterrupt:
        return 130


BRIDGE_GRPC_MIN = (1, 85)  # the generated modules in real/proto refuse older grpcio


def _bridge_packages_missing() -> str | None:
    """None when gRPC is importable and new enough for the bridge's generated code, else what is wrong. (TensorBoard
    pulls in some grpcio of its own, possibly older than the bridge needs.)"""
    try:
        import grpc
    except ImportError:
        return "grpcio is not installed"
    version = tuple(int(p) for p in grpc.__version__.split(".")[:2] if p.isdigit())
    if version < BRIDGE_GRPC_MIN:
        return f"grpcio {grpc.__version__} is older than {'.'.join(map(str, BRIDGE_GRPC_MIN))}"
    return None


def _check_old_flags(args: list[str], command: str, keys: type) -> None:
    """The robot commands used to take argparse `--flags`: name the new spelling of an old one in a one-line error."""

    from robot_rl.hil.cli import OLD_FLAGS

    valid = {f.name for f in dataclasses.fields(keys)}
    for a in args:
        flag = a.split("=", 1)[0]
        new, _, note = OLD_FLAGS.get(flag, "").partition(" (")
        if new and new.split("=", 1)[0].split(".", 1)[0] in valid:
            raise UserError(f"'{flag}' is now '{new}'" + (f" ({note}" if note else ""))
        if flag == "device" and "device" not in valid and "teleop" in valid:
            raise UserError(f"{command} has no device= (device= is a torch device); the operator's device is "
                            "teleop=<keyboard|gamepad|spacemouse|scripted|replay>")


def _dotted_keys(schema: type, prefix: str = "") -> list[str]:
    """Every key of a command's dataclass, dotted (`env.num_envs`), for "did you mean" hints."""
    keys = []
    for f in dataclasses.fields(schema):
        keys.append(prefix + f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys += _dotted_keys(type(default), f"{prefix}{f.name}.")
    return keys


def _check_env_spec(args: list[str], command: str) -> None:
    """`env=` is a preset group in train; in collect, eval and bc the environment is `env.spec=<spec>` (bc's
    was `eval_env=`)."""
    for a in args:
        if a.startswith(("env=", "eval_env=")):
            spec = a.split("=", 1)[1]
            raise UserError(f"'{a}': the environment of {command} is env.spec=<spec>, e.g. env.spec={spec or 'arm:push'}")


#: finetune keys whose spelling differs between its two schemas: `train.*` (TrainConfig, as in `robot-rl train`)
#: and the top-level keys of FinetuneConfig (fine-tuning a BC policy). Both spellings work in both.
_FINETUNE_LOOP_KEYS = ("steps", "eval_every", "replay_capacity")


def _finetune_steps(overrides: list[str]) -> list[str]:
    """`train.steps=` (as in train) and `steps=` mean the same in finetune, whichever schema applies."""
    policy = _fine_tunes_a_policy(overrides)
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        bare = key.lstrip("+")
        if sep and policy and bare.startswith("train.") and bare[len("train."):] in _FINETUNE_LOOP_KEYS:
            o = f"{bare[len('train.'):]}={value}"
        elif sep and not policy and bare in _FINETUNE_LOOP_KEYS:
            o = f"train.{bare}={value}"
        out.append(o)
    return out


def _fail(message: str) -> int:
    print(f"robot-rl: error: {message}", file=sys.stderr)
    return 2


# -- train --------------------------------------------------------------------------------------------------
def _finetune(overrides: list[str]) -> int:
    if _fine_tunes_a_policy(overrides):
        return _finetune_policy(overrides)
    return _train(overrides, finetune=True)


def _fine_tunes_a_policy(overrides: list[str]) -> bool:
    """Fine-tuning a BC policy (residual, dsrl, reinflow, dppo) rather than offline-to-online SAC (WSRL)?"""
    from robot_rl.config import presets

    for o in overrides:
        key, _, value = o.partition("=")
        if key in {"method", "base_policy", "finetune"}:
            return True
        if key == "experiment" and value in presets("finetune"):
            return True
        if key == "resume":
            return _saved_run_is_policy_finetune(Path(value))
    return False


def _saved_run_is_policy_finetune(run_dir: Path) -> bool:
    """A run directory's config.yaml was written from FinetuneConfig (it has `method`), not TrainConfig?"""
    from omegaconf import OmegaConf

    path = run_dir / "config.yaml"
    if not path.is_file():
        return False
    try:
        saved = OmegaConf.load(path)
    except Exception:  # a damaged file: load_run_config reports it with the key
        return False
    return OmegaConf.is_dict(saved) and "method" in saved and "train" not in saved


def _finetune_policy(overrides: list[str]) -> int:
    from robot_rl.config import compose_config, load_run_config
    from robot_rl.finetune.config import FinetuneConfig
    from robot_rl.finetune.loop import Finetuner

    _check_overrides(overrides)
    overrides = [f"finetune={o.split('=', 1)[1]}" if o.startswith("experiment=") else o for o in overrides]
    resume = next((o.split("=", 1)[1] for o in overrides if o.startswith("resume=")), None)
    if resume:
        run_dir = Path(resume)
        rest = [o for o in overrides if not o.startswith(("resume=", "run_dir="))]
        cfg = load_run_config(run_dir, rest, FinetuneConfig)
        cfg.resume, cfg.run_dir = str(run_dir), str(run_dir)
        if not (run_dir / "checkpoints" / "latest.pt").is_file():
            raise UserError(f"{run_dir} has no checkpoints/latest.pt to resume from; start it again instead")
    else:
        cfg = compose_config("finetune", FinetuneConfig, overrides)
        if not Path(cfg.base_policy).is_dir():
            raise UserError(
                f"base_policy {cfg.base_policy} does not exist; train one with robot-rl bc (it writes "
                "<run_dir>/policy), see the preset's header for the commands"
            )
        run_dir = Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg.name or f"{cfg.method}-{_slug(cfg.env.spec)}")
        if (run_dir / "checkpoints" / "latest.pt").exists():
            raise UserError(f"{run_dir} already holds a run; resume it with resume={run_dir} or pick another run_dir")
        cfg.run_dir = str(run_dir)
    finetuner = Finetuner(cfg, run_dir, resume=bool(resume))
    if not cfg.quiet:
        print(f"run directory: {run_dir}", flush=True)
        print(f"fine-tuning {cfg.base_policy} with {cfg.method} on {cfg.env.spec} for {cfg.steps:,} env steps "
              f"({cfg.env.num_envs} env(s), {cfg.device})", flush=True)
    summary = finetuner.run()
    last = summary["last"] or {}
    success = "" if last.get("success_rate") is None else f" | last success rate {last['success_rate']:.0%}"
    saved = f" | policy in {summary['policy_dir']}" if summary["policy_dir"] else ""
    print(f"done: {summary['env_steps']:,} env steps in {summary['wall_time_s']:.0f}s | last eval return "
          f"{last.get('eval_return_mean', float('nan')):.1f}{success}{saved} | outputs in {run_dir}", flush=True)
    return 0


def _train(overrides: list[str], finetune: bool = False) -> int:
    from robot_rl.config import compose_train_config, load_run_config
    from robot_rl.device import bf16_cpu_hint
    from robot_rl.trainer import Trainer

    _check_overrides(overrides)
    resume = next((o.split("=", 1)[1] for o in overrides if o.startswith("resume=")), None)
    if resume:
        run_dir = Path(resume)
        cfg = load_run_config(run_dir, [o for o in overrides if not o.startswith(("resume=", "run_dir="))])
        cfg.resume, cfg.run_dir = str(run_dir), str(run_dir)
        if not (run_dir / "checkpoints" / "latest.pt").is_file():
            raise UserError(f"{run_dir} has no checkpoints/latest.pt to resume from; start it again instead")
    else:
        cfg = compose_train_config(overrides)
        run_dir = Path(cfg.run_dir) if cfg.run_dir else _default_run_dir(cfg.name or _slug(cfg.env.spec))
        if (run_dir / "checkpoints" / "latest.pt").exists():
            raise UserError(f"{run_dir} already holds a run; resume it with resume={run_dir} or pick another run_dir")
        cfg.run_dir = str(run_dir)
    if finetune and not (cfg.data.path or cfg.offline.init):
        raise UserError(
            "finetune starts from data or a pretrained agent: pick an experiment (e.g. experiment=wsrl_push) or set "
            "data.path=<dataset> offline.steps=N, or offline.init=<checkpoint.pt>"
        )

    trainer = Trainer(cfg, run_dir, resume=bool(resume))
    if not cfg.quiet:
        print(f"run directory: {run_dir}", flush=True)
        print(
            f"training {cfg.env.spec} for {cfg.train.steps:,} env steps "
            f"({_describe_agent(cfg.agent)}, {cfg.env.num_envs} env(s), {cfg.device})",
            flush=True,
        )
        if hint := bf16_cpu_hint(cfg.device, cfg.agent.bf16, cfg.train.steps):
            print(hint, flush=True)
    summary = trainer.run()
    best = summary["best_eval_return"]
    repeat = cfg.env.action_repeat
    repeated = f" (x{repeat} action repeat = {summary['env_steps'] * repeat:,} control steps)" if repeat > 1 else ""
    print(
        f"done: {summary['env_steps']:,} env steps{repeated} in {summary['wall_time_s']:.0f}s | "
        f"last eval return {summary['last_eval_return']:.1f} | best {best:.1f} | outputs in {run_dir}",
        flush=True,
    )
    return 0


def _describe_agent(agent: SACConfig) -> str:
    """One phrase for the run header: which networks and critic, how many critics and updates per step."""
    if agent.network == "hyper":
        critic = f"{agent.num_atoms}-atom" if agent.num_atoms > 1 else "scalar"
        nets = f"SAC, hyperspherical {agent.critic_width}-wide critic ({critic})"
    else:
        nets = f"SAC, MLP {'x'.join(map(str, agent.hidden_dims))} critic"
    count = "1 critic" if agent.num_critics == 1 else f"{agent.num_critics} critics"
    precision = "bf16" if agent.bf16 else "fp32"
    return f"{nets}: {count}, UTD {agent.utd}, {precision}{', compiled' if agent.compile else ''}"


def _check_overrides(overrides: list[str], command: str = "train") -> None:
    for o in overrides:
        if o.startswith("-"):
            raise UserError(f"unknown option '{o}'; settings are key=value (see robot-rl {command} --help)")
        if "=" not in o:
            raise UserError(f"'{o}' is not key=value (see robot-rl {command} --help)")


def _slug(spec: str) -> str:
    name = spec.split(":", 1)[-1].lower()
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def _default_run_dir(name: str) -> Path:
    return Path("runs") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{name}"


TRAIN_EXAMPLES = [
    "  robot-rl train                                          # SAC on Pendulum-v1, a few minutes",
    "  robot-rl train experiment=cartpole_swingup agent=rlpd",
    "  robot-rl train env.spec=dmc:cartpole-swingup agent.utd=4 train.steps=100000 seed=3",
    "  robot-rl train experiment=rlpd_push                     # SAC + 20 demos (data/push_demos), sparse push",
    "  robot-rl train resume=runs/<run dir> [train.steps=...]   # continue from the latest checkpoint",
]
FINETUNE_EXAMPLES = [
    "  robot-rl finetune experiment=wsrl_push                          # Cal-QL, warm-up, online SAC",
    "  robot-rl finetune experiment=wsrl_push train.learning_starts=0  # naive fine-tuning",
    "  robot-rl finetune experiment=wsrl_push offline.algorithm=iql",
    "  robot-rl finetune experiment=wsrl_push offline.steps=0 offline.init=runs/<run>/checkpoints/pretrained.pt",
]


def _finetune_policy_help() -> str:
    from robot_rl.config import describe, key_lines, presets
    from robot_rl.finetune.config import FinetuneConfig

    lines = [
        "usage: robot-rl finetune experiment=<method>_<task> [key=value ...]",
        "       robot-rl finetune method=residual|dsrl|reinflow|dppo base_policy=<policy dir> env.spec=... [...]",
        "",
        "1. Fine-tuning a behaviour-cloning policy saved by `robot-rl bc` (docs/finetuning.md):",
        "  residual  SAC on a bounded correction of the frozen policy (ResFiT); any policy; demos via data=",
        "  dsrl      SAC in the initial-noise space of a frozen diffusion or flow policy",
        "  reinflow  PPO on a flow policy with learned noise at each Euler step (many envs)",
        "  dppo      PPO over the last DDIM steps of a diffusion policy (many envs)",
        "Writes config.yaml, metrics.csv (steps = executed env actions), learning_curve.png,",
        "checkpoints/{latest,best}.pt, and for reinflow/dppo the fine-tuned policy in <run_dir>/policy.",
        "",
        f"Presets: experiment=  {', '.join(presets('finetune'))}",
        "",
        "train.steps=, train.eval_every= and train.replay_capacity= (as in train) are steps=, eval_every= and",
        "replay_capacity= here; in recipe 2 steps= etc. are train.steps= etc.",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(FinetuneConfig), max_width=48)
    return "\n".join(lines) + "\n\n"


def _finetune_help() -> str:
    return _finetune_policy_help() + _train_help(
        "finetune",
        [
            "2. Offline-to-online RL from a dataset (`robot-rl collect` writes one). The same keys as `train`;",
            "the data.* and offline.* keys choose the recipe:",
            "  WSRL:   data.path=D offline.steps=N data.mix_online=false train.learning_starts=5000",
            "          (pretrain with Cal-QL, warm up with the pretrained policy, then SAC on online data only)",
            "  naive:  the same with train.learning_starts=0 (online updates start at once)",
            "  RLPD:   data.path=D (no pretraining; every batch half prior data, half online data)",
            "Outputs as for train, plus offline_metrics.csv and checkpoints/pretrained.pt.",
        ],
    )


def _resolved_train_config(settings: list[str]) -> tuple[object, str]:
    """The config a `train` run with `settings` would write to its config.yaml, for `--help`: the presets composed,
    then what the run resolves from its env (the critic count: `resolve_critics`), from a one-env instance of it.
    Returns (config, a note for the help); with settings that do not compose, the schema's defaults and why."""
    from robot_rl.agents.sac import resolve_critics
    from robot_rl.config import TrainConfig, compose_train_config
    from robot_rl.trainer import make_env

    try:
        cfg = compose_train_config([s for s in settings if not s.startswith(("resume=", "run_dir="))])
    except Exception as e:  # noqa: BLE001 - help must print whatever the settings are
        return TrainConfig(), f"(these settings do not compose: {e}; showing the schema's defaults)"
    try:
        env = make_env(cfg, num_envs=1)
        try:
            cfg.agent = resolve_critics(cfg.agent, env.can_terminate)
        finally:
            env.close()
    except Exception as e:  # noqa: BLE001 - an env that cannot be built here still gets its help
        return cfg, f"(agent.num_critics=null resolves from the env, which could not be built here: {e})"
    return cfg, ""


def _train_help(command: str = "train", intro: list[str] | None = None, settings: list[str] | None = None) -> str:
    """`train --help` (and the second half of `finetune --help`): the keys with the values a run with `settings`
    would use, as its config.yaml would record them (test_cli: help equals a default run's config.yaml)."""
    from robot_rl.config import TrainConfig, describe, key_lines, presets

    if settings is None:
        cfg, note = TrainConfig(), "(the schema's defaults; presets change many: robot-rl train [presets] --help)"
    else:
        cfg, note = _resolved_train_config(settings)
    given = " ".join(settings or []) or "a default run"

    lines = [
        f"usage: robot-rl {command} [group=preset ...] [key=value ...]",
        "",
        *(intro or [
            "Trains SAC (with the RLPD options) on a batched environment and writes a run directory:",
            "config.yaml, metrics.csv, tensorboard/ (or wandb/: logger=wandb), checkpoints/{latest,best}.pt,",
            "learning_curve.png, videos/.",
        ]),
        "",
        "Presets:",
        f"  env=        {', '.join(presets('env'))}",
        f"  agent=      {', '.join(presets('agent'))}",
        f"  experiment= {', '.join(presets('experiment'))}   (env + training length together)",
        "",
        "Examples:",
        *(FINETUNE_EXAMPLES if command == "finetune" else TRAIN_EXAMPLES),
        "",
        f"Keys, with the values {given} uses{':' if not note else ' ' + note + ':'}",
    ]
    lines += key_lines(describe(TrainConfig, instance=cfg))
    return "\n".join(lines) + "\n"


# -- collect ------------------------------------------------------------------------------------------------
def _collect_help() -> str:
    from robot_rl.collect import CollectArgs
    from robot_rl.config import describe, key_lines

    lines = [
        "usage: robot-rl collect env.spec=<spec> out=<dataset dir> [policy=expert|random|<checkpoint.pt>] [key=value ...]",
        "",
        "Records finished episodes to a dataset in the LeRobotDataset v3 layout (parquet + meta/, MP4 for cameras).",
        "Episodes are written as they finish; an interrupted recording keeps every finished episode.",
        "",
        "Examples:",
        "  robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 out=data/push_demos",
        "  robot-rl collect env.spec=arm:push-sparse policy=expert noise=0.6 episodes=30 out=data/push_mixed append=true",
        "  robot-rl collect env.spec=arm:reach policy=runs/<run>/checkpoints/best.pt episodes=50 out=data/reach_sac",
        "  robot-rl collect env.spec=arm:push-sparse-pixels policy=expert episodes=20 out=data/push_pixel_demos",
        "    (cameras as videos; the expert steers by the simulator's state, the dataset holds only the observation)",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(CollectArgs))
    return "\n".join(lines) + "\n"


def _collect(args: list[str]) -> int:
    from robot_rl.collect import CollectArgs, collect

    a = _parse_args(CollectArgs, args, "collect")
    if not a.out:
        raise UserError("collect needs out=<dataset dir>")
    if a.episodes < 1 or a.env.num_envs < 1:
        raise UserError("episodes and env.num_envs must be >= 1")
    if a.noise < 0:
        raise UserError("noise must be >= 0")
    if len(a.env.pixel_size) != 2 or min(a.env.pixel_size) < 16:
        raise UserError("env.pixel_size must be [height, width], each >= 16")
    if a.policy not in {"expert", "random"} and not Path(a.policy).is_file():
        raise UserError(f"policy must be expert, random or a checkpoint file; {a.policy} does not exist")
    result = collect(a)
    print(f"done: {result['episodes']} episodes in {result['out']} | success rate {result['success_rate']:.0%}")
    return 0


# -- bc -----------------------------------------------------------------------------------------------------
def _bc_help() -> str:
    from robot_rl.bc import BCConfig
    from robot_rl.config import describe, key_lines

    lines = [
        "usage: robot-rl bc dataset=<dataset dir> policy=mlp|diffusion|flow [key=value ...]",
        "",
        "Behaviour cloning of a chunked policy from a dataset (robot-rl collect writes one): trains on",
        "(observation, action chunk) pairs, writes <run_dir>/policy/{model.safetensors,config.json} (load it with",
        "policies.io.load_policy), metrics.csv, tensorboard/, learning_curve.png (the loss) and bc_config.json, and",
        "with env.spec= runs evaluation episodes; evaluate the policy later with robot-rl eval policy=<run_dir>/policy.",
        "",
        "Examples:",
        "  robot-rl bc dataset=data/push_demos policy=diffusion env.spec=arm:push",
        "  robot-rl bc dataset=data/push_demos policy=flow num_inference_steps=4 steps=5000 run_dir=runs/flow_push",
        "  robot-rl bc dataset=data/push_demos policy=mlp gaussian=true horizon=4 execute=2",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(BCConfig))
    return "\n".join(lines) + "\n"


def _bc(args: list[str]) -> int:
    from robot_rl.bc import BCConfig, train_bc

    cfg: BCConfig = _parse_args(BCConfig, args, "bc")
    cfg.validate()
    if not Path(cfg.dataset).is_dir():
        raise UserError(f"dataset {cfg.dataset} does not exist (record one with robot-rl collect)")
    if not cfg.run_dir:
        cfg.run_dir = str(_default_run_dir(f"bc-{cfg.policy}"))
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


def _is_text_key(cls: type, key: str) -> bool:
    """Is `key` (dotted) a `str` or `str | None` field of the dataclass `cls`?"""
    import typing

    node: typing.Any = cls
    for part in key.split("."):
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            return False
        try:
            hints = typing.get_type_hints(node)
        except Exception:
            return False
        if part not in hints:
            return False
        node = hints[part]
    return node is str or node == (str | None)


def _parse_args(cls: type, args: list[str], command: str):
    """`key=value` settings into the dataclass `cls`; a mistake raises a one-line UserError naming the key.

    Values are YAML (numbers, true/false, null, [lists]) except for text keys, which take the text as typed: a
    token or path such as 0123 stays 0123."""

    from omegaconf import OmegaConf

    _check_overrides(args, command)
    text_keys = {}
    parsed = []
    for a in args:
        key, _, value = a.partition("=")
        if value != "null" and _is_text_key(cls, key):
            text_keys[key] = value
        else:
            text_keys.pop(key, None)  # the last setting of a key wins, `teleop=scripted teleop=null` too
            parsed.append(a)
    try:
        merged = OmegaConf.merge(OmegaConf.structured(cls), OmegaConf.from_dotlist(parsed))
        for key, value in text_keys.items():
            OmegaConf.update(merged, key, value, merge=False)
        return OmegaConf.to_object(merged)
    except Exception as e:
        import re

        from robot_rl.config import _keys_under

        text = str(e)
        first = text.splitlines()[0]
        key = re.search(r"full_key: ([\w.\[\]]+)", text)
        name = key.group(1) if key else ""
        parent, _, leaf = name.rpartition(".")
        if "not in" in first and name:
            valid = _keys_under(parent, cls)
            if not valid:  # a dict (driver_args, teleop_args) takes any key; the key above it was wrong
                valid = [f.name for f in dataclasses.fields(cls)]
            under = f" under {parent}" if parent and _keys_under(parent, cls) else ""
            elsewhere = [k for k in _dotted_keys(cls) if k.rpartition(".")[2] == leaf and k != name]
            hint = f" (did you mean {' or '.join(elsewhere)}?)" if elsewhere else ""
            raise UserError(f"unknown key '{name}' for {command}{hint}; valid keys{under}: {', '.join(valid)}") from e
        if name:
            raise UserError(f"bad value for {name}: {first} (see robot-rl {command} --help)") from e
        keys = ", ".join(f.name for f in dataclasses.fields(cls))
        raise UserError(f"{first}; valid keys of {command}: {keys}") from e


# -- eval ---------------------------------------------------------------------------------------------------
@dataclass
class EvalEnvArgs:
    spec: str = _help("", "policy=: environment spec to evaluate in (e.g. arm:push-sparse); run=: the run's own")


@dataclass
class EvalArgs:
    run: str = _help("", "run directory to evaluate (its checkpoints/<checkpoint>.pt and config.yaml)")
    policy: str = _help("", "or a saved policy directory (robot-rl bc, ReinFlow/DPPO, robot-rl export); needs env.spec=")
    env: EvalEnvArgs = field(default_factory=EvalEnvArgs)
    checkpoint: str = _help("best", "run=: best or latest")
    episodes: int = _help(10, "evaluation episodes (policy=: one in each of this many parallel envs)")
    video: bool = _help(True, "run=: write videos/eval_<checkpoint>.mp4 in the run directory")
    seed: int | None = _help(None, "seed (default: run=: the run's evaluation seed; policy=: 0), + env index")
    device: str = _help("cpu", "torch device of the policy (cpu, cuda)")
    allow_other_task: bool = _help(False, "policy=: run it on env.spec even if its config.json names another task")


def _eval_help() -> str:
    from robot_rl.config import describe, key_lines

    lines = [
        "usage: robot-rl eval run=<run dir> [checkpoint=best|latest] [episodes=10] [video=true] [seed=N] [device=cpu]",
        "       robot-rl eval policy=<policy dir> env.spec=<spec> [episodes=10] [seed=N] [device=cpu]",
        "",
        "run=: runs deterministic episodes of a trained agent, prints mean and std return (and success rate",
        "where the task defines it), and writes videos/eval_<checkpoint>.mp4 in the run directory.",
        "policy=: the same for a saved policy directory (robot-rl bc, ReinFlow/DPPO, any run via robot-rl export), one",
        "episode in each of `episodes` parallel envs of env.spec, seeded with seed (default 0) + env index.",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(EvalArgs))
    return "\n".join(lines) + "\n"


def _parse_eval_args(args: list[str]) -> EvalArgs:
    parsed: EvalArgs = _parse_args(EvalArgs, args, "eval")
    if bool(parsed.run) == bool(parsed.policy):
        raise UserError("eval needs run=<run dir>, or policy=<policy dir> env.spec=<spec>")
    if parsed.policy and not parsed.env.spec:
        raise UserError("eval policy=<dir> needs env.spec=<spec>, e.g. env.spec=arm:push-sparse")
    if parsed.run and parsed.env.spec:
        raise UserError("eval run=<run dir> evaluates in the run's own environment; env.spec= is for policy=")
    if parsed.checkpoint not in {"best", "latest"}:
        raise UserError(f"checkpoint must be best or latest, not '{parsed.checkpoint}'")
    if parsed.episodes < 1:
        raise UserError("episodes must be >= 1")
    return parsed


def _eval(args: list[str]) -> int:
    from robot_rl import checkpoint
    from robot_rl.config import load_run_config
    from robot_rl.evaluation import MAX_EVAL_ENVS, evaluate, record_video
    from robot_rl.trainer import EVAL_SEED_OFFSET, build_agent, make_env

    a = _parse_eval_args(args)
    if a.policy:
        return _eval_policy_dir(a)
    run_dir = Path(a.run)
    if (run_dir / "bc_config.json").is_file() and not (run_dir / "config.yaml").is_file():
        bc = json.loads((run_dir / "bc_config.json").read_text())
        spec = bc.get("env", {}).get("spec") or "<the task's env spec>"
        raise UserError(f"{run_dir} is a behaviour-cloning run (robot-rl bc): evaluate its policy with "
                        f"robot-rl eval policy={run_dir / 'policy'} env.spec={spec}")
    if _saved_run_is_policy_finetune(run_dir):
        return _eval_finetune_run(a, run_dir)
    cfg = load_run_config(run_dir)
    cfg.device = a.device
    ckpt = run_dir / "checkpoints" / f"{a.checkpoint}.pt"
    if a.checkpoint == "best" and not ckpt.is_file() and ckpt.with_name("latest.pt").is_file():
        raise UserError(f"{run_dir} has no best.pt yet (written at its first evaluation); evaluate its latest.pt "
                        f"with checkpoint=latest")
    state = checkpoint.load(ckpt)
    seed = cfg.seed + EVAL_SEED_OFFSET if a.seed is None else a.seed
    with make_env(cfg, min(a.episodes, MAX_EVAL_ENVS)) as env:
        agent = build_agent(cfg, env)
        agent.load_state_dict(state["agent"])
        result = evaluate(lambda o: agent.act(o, deterministic=True).to(env.device), env, seed=seed,
                          episodes=a.episodes, message=print)
    _print_eval(f"{cfg.env.spec} | {a.checkpoint} checkpoint (env step {state['env_steps']:,})", a.episodes, result)
    if a.video:
        height, width = cfg.train.video_size
        path = run_dir / "videos" / f"eval_{a.checkpoint}.mp4"
        with make_env(cfg, 1, render=True, render_size=(height, width)) as video_env:
            record_video(lambda o: agent.act(o, deterministic=True).to(video_env.device), video_env, path, seed,
                         message=lambda m: print(m, flush=True), what=f"videos/{path.name}")
        print(f"video: {path}", flush=True)
    return 0


def _print_eval(what: str, episodes: int, result: dict) -> None:
    """The one result line of `robot-rl eval run=`: return mean ± std, and the success rate where defined."""
    line = (f"{what} | {episodes} episodes | return {result['eval_return_mean']:.2f} ± "
            f"{result['eval_return_std']:.2f}")
    if result["success_rate"] is not None:
        line += f" | success rate {result['success_rate']:.0%}"
    print(line, flush=True)


def _eval_finetune_run(a: EvalArgs, run_dir: Path) -> int:
    """`eval run=` of a `finetune method=...` run: the method's own evaluation policy (residual: base plus
    correction; DSRL: noise actor through the base; ReinFlow/DPPO: the fine-tuned chain) from its checkpoint."""
    from robot_rl import checkpoint, envs
    from robot_rl.config import load_run_config
    from robot_rl.evaluation import MAX_EVAL_ENVS, evaluate
    from robot_rl.finetune.config import FinetuneConfig
    from robot_rl.finetune.loop import build_method
    from robot_rl.policies.io import load_policy
    from robot_rl.runner import EVAL_SEED_OFFSET

    cfg = load_run_config(run_dir, schema=FinetuneConfig)
    cfg.device = a.device
    ckpt = run_dir / "checkpoints" / f"{a.checkpoint}.pt"
    state = checkpoint.load(ckpt)
    state = state.get("method", state)  # runs written before the Runner nested the method's state
    n = min(a.episodes, MAX_EVAL_ENVS)
    cfg.replay_capacity = max(n, 1)  # nothing is collected: the replay only has to exist
    seed = cfg.seed + EVAL_SEED_OFFSET if a.seed is None else a.seed
    with envs.make(cfg.env.spec, num_envs=n, device=cfg.device, max_episode_steps=cfg.env.max_episode_steps) as env:
        method = build_method(cfg, load_policy(cfg.base_policy, device=cfg.device), env)
        replay = getattr(method, "replay", None)
        if "replay" not in state and replay is not None:  # best.pt leaves the replay out
            state = {**state, "replay": replay.state_dict()}
        method.load_state_dict(state)
        act, on_done = method.eval_policy()
        result = evaluate(act, env, seed=seed, on_done=on_done, episodes=a.episodes, message=print)
    what = f"{cfg.env.spec} | {cfg.method} fine-tuning, {a.checkpoint} checkpoint (env step {state['env_steps']:,})"
    _print_eval(what, a.episodes, result)
    if a.video:
        print("(no video for fine-tuning runs: `robot-rl eval policy=<run>/policy` records ReinFlow/DPPO policies "
              "through their saved policy directory)", flush=True)
    return 0


def _eval_policy_dir(a: EvalArgs) -> int:
    from robot_rl.bc import evaluate_policy
    from robot_rl.evaluation import MAX_EVAL_ENVS
    from robot_rl.export import check_task
    from robot_rl.policies.io import load_policy

    check_task(a.policy, a.env.spec, a.allow_other_task)
    policy = load_policy(a.policy, device=a.device)
    result = evaluate_policy(policy, a.env.spec, num_envs=min(a.episodes, MAX_EVAL_ENVS),
                             seed=0 if a.seed is None else a.seed, episodes=a.episodes, message=print)
    line = f"{a.env.spec} | {a.policy} | {a.episodes} episodes | return {result['return_mean']:.2f}"
    line += f" | length {result['length_mean']:.1f}"
    if result["success_rate"] is not None:
        line += f" | success rate {result['success_rate']:.0%}"
    print(line, flush=True)
    return 0


# -- export -------------------------------------------------------------------------------------------------
EXPORT_FORMATS = ("policy", "onnx")


@dataclass
class ExportArgs:
    run: str = _help("", "required: a run directory, a checkpoint file (.pt) or a policy directory")
    out: str = _help("", "required: the policy directory to write (an existing one is replaced; nothing else is)")
    format: str = _help("policy", "policy: safetensors + config.json; onnx: also policy.onnx (needs the export extra)")


def _export_help() -> str:
    from robot_rl.config import describe, key_lines

    lines = [
        "usage: robot-rl export run=<run dir | checkpoint.pt | policy dir> out=<dir> [format=policy|onnx]",
        "",
        "Writes the run's evaluation policy as a policy directory (model.safetensors + config.json), loadable",
        "without training code by eval policy=, deploy checkpoint=, Agent.load and robot_rl.policies.io.load_policy:",
        "SAC runs (any agent preset; the actor's tanh(mean), with its observation normalisation; from cameras",
        "with the encoders too), BC, residual RL (base + correction), DSRL (noise actor + base), ReinFlow and DPPO.",
        "The weights come from the run's policy/ directory if it has one, else checkpoints/best.pt, else latest.pt.",
        "format=onnx also writes policy.onnx: raw observations (camera policies: state and each camera group's",
        "uint8 image; diffusion, flow and DSRL: also the latent noise) in, the action or action chunk in [-1, 1]",
        "out; config.json's metadata.onnx names the inputs and outputs (docs/python-api.md). deploy runs camera",
        "policies on a robot that serves those cameras (serve-robot pixels=true).",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(ExportArgs))
    return "\n".join(lines) + "\n"


def _export(args: list[str]) -> int:
    from robot_rl.export import export

    a: ExportArgs = _parse_args(ExportArgs, args, "export")
    if not a.run or not a.out:
        raise UserError("export needs run=<run dir, checkpoint or policy dir> and out=<dir>")
    if a.format not in EXPORT_FORMATS:
        raise UserError(f"format must be one of {', '.join(EXPORT_FORMATS)}, not '{a.format}'")
    out = export(a.run, a.out, onnx=a.format == "onnx")
    what = "policy directory and policy.onnx" if a.format == "onnx" else "policy directory"
    print(f"exported {a.run} -> {out} ({what})", flush=True)
    return 0


# -- classifier ---------------------------------------------------------------------------------------------
@dataclass
class ClassifierArgs:
    dataset: str = _help("", "required: a dataset with camera features and next.success flags (LeRobot v3 layout)")
    out: str = _help("", "required: the classifier directory to write (an existing classifier is replaced)")
    extra: list[str] = _help([], "more datasets (the same cameras) whose episodes all train, none held out: e.g. "
                             "rollouts of a policy trained on this classifier's reward (robot-rl collect "
                             "policy=<checkpoint>) with the task's or the operator's success flags, so it unlearns "
                             "the false positives that policy found (HIL-SERL's second round of labels)")
    steps: int = _help(2000, "gradient steps (Adam, class-balanced batches)")
    seed: int = _help(0, "seed of the episode split, the initialisation, the batches and the augmentation")
    holdout: float = _help(0.2, "fraction of the episodes held out (whole episodes) for precision and recall")
    threshold: float = _help(0.5, "probability at or above which a frame counts as success in the reported figures")
    batch_size: int = _help(64, "frames per step, half of them success frames")
    lr: float = _help(3e-4, "Adam learning rate")
    cameras: list[str] = _help([], "dataset cameras to read (e.g. [front]); default: all of them")
    state: bool = _help(False, "also read the proprioceptive observation.state (default: images only, as HIL-SERL)")
    feature_dim: int = _help(50, "features per camera (DrQ conv encoder)")
    channels: int = _help(32, "conv channels per layer")
    layers: int = _help(4, "conv layers (the first with stride 2)")
    shift_pad: int = _help(4, "random shifts of the training frames by up to this many pixels (DrQ's augmentation; "
                           "0: none, what encoder_readout wants: its estimator saw unshifted frames)")
    pool: str = _help("flatten", "how the conv map becomes features: flatten (DrQ) or spatial_softmax (a keypoint per "
                      "channel: fewer weights to fit from few labels, for success that is where objects are)")
    encoder: str = _help("conv", "conv (the DrQ encoder above, trained) or pretrained (HIL-SERL's: a frozen ResNet "
                         "from encoder_weights, learned spatial pooling; its weights are saved with the classifier)")
    encoder_weights: str = _help("", "encoder=pretrained: the backbone's local weights file (a torchvision-style "
                                 "state dict, .pth/.pt or .safetensors; never downloaded)")
    encoder_backbone: str = _help("resnet10", "encoder=pretrained: resnet10 (HIL-SERL's) or resnet18")
    encoder_spatial_features: int = _help(8, "encoder=pretrained: learned poolings per feature-map channel")
    encoder_readout: bool = _help(False, "encoder=pretrained: each camera's features are the frozen linear readout "
                                  "in encoder_weights (readout.<camera>.weight/.bias, e.g. a pose estimator's head; "
                                  "feature_dim = its outputs) instead of a learned pooling; with shift_pad=0")
    device: str = _help("cpu", "torch device to train on")


def _classifier_help() -> str:
    from robot_rl.config import describe, key_lines

    lines = [
        "usage: robot-rl classifier dataset=<dataset dir> out=<dir> [steps=2000] [seed=0] [holdout=0.2] [key=...]",
        "",
        "Trains a binary success classifier on a dataset's camera frames (HIL-SERL's learned reward). Frame t is a",
        "success when row t-1 of its episode has next.success (the observation its action led to). Whole episodes",
        "are held out; precision and recall on them are printed and saved in <out>/config.json beside the weights",
        "(model.safetensors). Use it as the reward of robot-rl train with env.reward_classifier=<out>.",
        "",
        "Examples:",
        "  robot-rl classifier dataset=data/push_cams out=classifiers/push",
        "  robot-rl classifier dataset=data/push_cams out=classifiers/push_front cameras=[front] steps=4000 seed=1",
        "  robot-rl classifier dataset=data/push_cams extra=[data/push_policy] out=classifiers/push_r2   (a second round:",
        "    frames of a policy trained on the first classifier's reward, robot-rl collect policy=<its checkpoint>)",
        "  robot-rl classifier dataset=data/push_cams out=classifiers/push_r10 cameras=[front] encoder=pretrained \\",
        "    encoder_weights=weights/resnet10.pt   (a frozen pretrained backbone, as HIL-SERL)",
        "",
        "Keys (default):",
    ]
    lines += key_lines(describe(ClassifierArgs))
    return "\n".join(lines) + "\n"


def _classifier(args: list[str]) -> int:
    import torch

    from robot_rl.classifier import save_classifier
    from robot_rl.classifier_train import (
        TrainSettings,
        join_frames,
        load_labelled_frames,
        split_episodes,
        train_classifier,
    )
    from robot_rl.policies.encoders import ENCODERS, POOLS, RESNET_BLOCKS, BackboneWeightsError

    a: ClassifierArgs = _parse_args(ClassifierArgs, args, "classifier")
    if not a.dataset or not a.out:
        raise UserError("classifier needs dataset=<dataset dir> and out=<dir>")
    if not Path(a.dataset).is_dir():
        raise UserError(f"dataset {a.dataset} does not exist (record one with robot-rl collect or teleop)")
    for key, ok in (("steps", a.steps >= 1), ("holdout", 0.0 < a.holdout < 1.0), ("threshold", 0.0 < a.threshold < 1.0),
                    ("batch_size", a.batch_size >= 2), ("lr", a.lr > 0), ("feature_dim", a.feature_dim >= 1),
                    ("channels", a.channels >= 1), ("layers", a.layers >= 1)):
        if not ok:
            rule = "in (0, 1)" if key in {"holdout", "threshold"} else ">= 2" if key == "batch_size" else "> 0"
            raise UserError(f"{key} must be {rule}, not {getattr(a, key)}")
    if a.pool not in POOLS:
        raise UserError(f"pool must be one of {', '.join(POOLS)}, not {a.pool!r}")
    if a.encoder not in ENCODERS:
        raise UserError(f"encoder must be one of {', '.join(ENCODERS)}, not {a.encoder!r}")
    if a.encoder == "pretrained" and not a.encoder_weights:
        raise UserError("encoder=pretrained needs encoder_weights=<local backbone weights file>")
    if a.encoder_backbone not in RESNET_BLOCKS:
        raise UserError(f"encoder_backbone must be one of {', '.join(RESNET_BLOCKS)}, not {a.encoder_backbone!r}")
    if a.encoder_spatial_features < 1:
        raise UserError(f"encoder_spatial_features must be >= 1, not {a.encoder_spatial_features}")
    if a.shift_pad < 0:
        raise UserError(f"shift_pad must be >= 0, not {a.shift_pad}")
    if a.encoder_readout and a.encoder != "pretrained":
        raise UserError("encoder_readout=true needs encoder=pretrained (the readout lives in encoder_weights)")
    missing = [d for d in a.extra if not Path(d).is_dir()]
    if missing:
        raise UserError(f"extra dataset {missing[0]} does not exist")
    frames = load_labelled_frames(a.dataset, a.cameras)
    held_out = None
    if a.extra:  # the held-out episodes come from dataset= only, split as without extra=
        names = [a.dataset, *a.extra]
        frames, primary = join_frames([frames, *(load_labelled_frames(d, a.cameras) for d in a.extra)], names)
        held_out = torch.zeros(len(frames), dtype=torch.bool)
        held_out[primary] = split_episodes(frames.episode[primary], a.holdout, a.seed)[1]
    settings = TrainSettings(
        steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed, holdout=a.holdout, threshold=a.threshold,
        use_state=a.state, feature_dim=a.feature_dim, channels=a.channels, layers=a.layers, pool=a.pool,
        shift_pad=a.shift_pad,
        encoder=a.encoder, encoder_weights=a.encoder_weights or None, encoder_backbone=a.encoder_backbone,
        encoder_spatial_features=a.encoder_spatial_features, encoder_readout=a.encoder_readout, device=a.device,
    )
    try:
        model, metrics = train_classifier(frames, settings, message=lambda s: print(s, flush=True), held_out=held_out)
    except BackboneWeightsError as e:
        raise UserError(str(e)) from None
    metadata = {"dataset": str(Path(a.dataset).resolve()), "extra": [str(Path(d).resolve()) for d in a.extra],
                "args": dataclasses.asdict(a)}
    out = save_classifier(model, a.out, metrics, metadata)
    print("[classifier] held-out precision/recall by threshold: " + ", ".join(
        f"{t}: {_share(m['precision'])}/{_share(m['recall'])}" for t, m in metrics["by_threshold"].items()), flush=True)
    print(f"done: held-out precision {_share(metrics['precision'])}, recall {_share(metrics['recall'])} at threshold "
          f"{metrics['threshold']:g} ({len(metrics['heldout_episodes'])} episodes, {metrics['heldout_frames']} frames, "
          f"{metrics['heldout_positives']} success) | classifier in {out}", flush=True)
    return 0


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


if __name__ == "__main__":
    sys.exit(main())
