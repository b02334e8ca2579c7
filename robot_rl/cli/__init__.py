"""`robot-rl`: one module per command (`robot_rl.cli.<command>`), each a `Command` listed in `COMMANDS` below, which
the top-level help, the dispatch and the "unknown command" line are built from.

Every command takes `key=value` settings (`train` and `finetune` also `group=preset`: Hydra overrides), and
`robot-rl <command> --help` lists each key with its default. `device=` is always a torch device; `env.spec=` is
always an environment spec. A user mistake (any `robot_rl.errors.UserError`) ends with one line on stderr and exit
status 2, Ctrl-C with 130; no stack trace.
"""

from __future__ import annotations

import os
import sys
from importlib import import_module

from robot_rl.cli.common import Command
from robot_rl.errors import UserError

os.environ.setdefault("MUJOCO_GL", "egl")

#: every command, in the order `robot-rl --help` lists them: robot_rl.cli.<module>.COMMAND
COMMANDS: dict[str, Command] = {c.name: c for c in (import_module(f"robot_rl.cli.{m}").COMMAND for m in (
    "train", "finetune", "eval", "collect", "bc", "distill", "aggregate", "export", "classifier",
    "serve_robot", "teleop", "hil_train", "deploy", "serve_policy",
))}
ROBOT_COMMANDS = ("serve-robot", "teleop", "hil-train", "deploy", "serve-policy")


def usage() -> str:
    """`robot-rl --help`, from the registered commands: each one's summary and first example."""
    width = max(map(len, COMMANDS)) + 2
    lines = ["usage: robot-rl <command> [key=value ...]    (or python -m robot_rl <command> ...; robot-rl --version)"]
    for title, names in (("Commands", [n for n in COMMANDS if n not in ROBOT_COMMANDS]),
                         ("Robot commands (see docs/hardware.md)", ROBOT_COMMANDS)):
        lines += ["", f"{title}:"]
        for name in names:
            command = COMMANDS[name]
            lines.append(f"  {name:<{width}}{command.summary}")
            if command.examples:
                lines.append(f"  {'':<{width}}{command.examples[0].split('  #')[0].rstrip()}")
    lines += [
        "",
        "Several seeds: `robot-rl train|finetune ... seed=0,1,2,3,4 jobs=2` trains each seed in <run_dir>/seed_<s>, then",
        "writes the mean and IQM over seeds with 95% bootstrap intervals (seeds.json) and curves with bands (curves.png).",
        "",
        "`robot-rl <command> --help` lists every key that can be set, with its default, and examples. Booleans are",
        "key=true|false. device= is the torch device everywhere (teleop= is the operator's device); env.spec= is the",
        "environment spec.",
    ]
    return "\n".join(lines) + "\n"


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


def main(argv: list[str] | None = None) -> int:
    """The `robot-rl` entry point: dispatch to the command; a UserError is one line and exit status 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in {"-h", "--help", "help"}:
        print(usage(), end="")
        return 0
    if argv[0] in {"--version", "-V", "version"}:
        print(version_line())
        return 0
    command, args = COMMANDS.get(argv[0]), argv[1:]
    try:
        if command is None:
            raise UserError(f"unknown command '{argv[0]}'; choose one of: {', '.join(COMMANDS)}")
        if any(a in {"-h", "--help"} for a in args):
            print(command.help_text(args), end="")
            return 0
        if command.torch_device:
            from robot_rl.device import check_torch_device

            for a in args:
                if a.partition("=")[0] == "device":
                    check_torch_device(a.partition("=")[2])
        return command.run(args)
    except UserError as e:
        print(f"robot-rl: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
