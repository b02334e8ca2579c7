"""What every command shares: the `Command` record, `key=value` parsing into a command's dataclass, its help
page, and the run directory and seed-list helpers of the training commands.

A command module builds one `Command`; `robot_rl.cli` lists them, so the top-level help, the dispatch and the
"unknown command" line cannot disagree about which commands exist.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from robot_rl.errors import UserError


@dataclass(frozen=True)
class Command:
    """One `robot-rl <name>`: its runner and what `--help` shows. `help` (given the other settings on the command
    line) replaces the page built from `usage`, `about`, `examples` and the keys of `schema()`."""

    name: str
    summary: str  # one line in `robot-rl --help`
    run: Callable[[list[str]], int]
    usage: list[str] = field(default_factory=list)
    about: list[str] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)  # the first one is shown in `robot-rl --help`
    schema: Callable[[], type] | None = None
    help: Callable[[list[str]], str] | None = None
    torch_device: bool = True  # `device=` is checked as a torch device before the command runs

    def help_text(self, settings: list[str]) -> str:
        """`robot-rl <name> --help`."""
        if self.help is not None:
            return self.help(settings)
        return page(self.usage, self.about, self.examples, self.schema())


def page(usage: list[str], about: list[str], examples: list[str], schema: type | None, heading: str = "Keys (default):",
         instance: Any = None, max_width: int | None = None) -> str:
    """A help page: usage lines, what the command does, examples, then each key with its default."""
    from robot_rl.config import describe, key_lines

    lines = [*usage, "", *about]
    if examples:
        lines += ["", "Examples:", *(f"  {e}" for e in examples)]
    if schema is not None:
        lines += ["", heading, *key_lines(describe(schema, instance=instance), max_width=max_width)]
    return "\n".join(lines) + "\n"


def check_overrides(overrides: list[str], command: str = "train") -> None:
    """Every setting is key=value: an argparse-style `--flag` or a bare word is one line saying so."""
    for o in overrides:
        if o.startswith("-"):
            raise UserError(f"unknown option '{o}'; settings are key=value (see robot-rl {command} --help)")
        if "=" not in o:
            raise UserError(f"'{o}' is not key=value (see robot-rl {command} --help)")


def check_env_spec(args: list[str], command: str) -> None:
    """`env=` is a preset group in train; where the environment is `env.spec=<spec>`, say so."""
    for a in args:
        if a.startswith("env="):
            spec = a.split("=", 1)[1]
            raise UserError(f"'{a}': the environment of {command} is env.spec=<spec>, e.g. env.spec={spec or 'arm:push'}")


def setting(overrides: list[str], key: str) -> str | None:
    """The value of the last `key=` among the settings, or None."""
    values = [o.split("=", 1)[1] for o in overrides if o.split("=", 1)[0] == key]
    return values[-1] if values else None


def slug(spec: str) -> str:
    """A run directory name from an env spec (`dmc:cartpole-swingup` -> `cartpole-swingup`): no colons or slashes."""
    name = spec.split(":", 1)[-1].lower()
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in name)


def default_run_dir(name: str) -> Path:
    """`runs/<date>_<name>`: dated, so runs started without `run_dir=` never collide."""
    return Path("runs") / f"{datetime.now():%Y-%m-%d_%H-%M-%S}_{name}"


def new_run_dir(run_dir: str | None, name: str) -> Path:
    """The directory of a new run: `run_dir=` or a dated one; one that already holds a run is refused."""
    path = Path(run_dir) if run_dir else default_run_dir(name)
    if (path / "checkpoints" / "latest.pt").exists():
        raise UserError(f"{path} already holds a run; resume it with resume={path} or pick another run_dir")
    return path


def resumed(resume: str, overrides: list[str], *schema: type) -> tuple[Path, Any]:
    """The directory and saved config (with `overrides` but resume= and run_dir=) of a run to resume, which can only
    be resumed from its latest.pt: said before anything is built."""
    from robot_rl.config import load_run_config

    run_dir = Path(resume)
    cfg = load_run_config(run_dir, [o for o in overrides if not o.startswith(("resume=", "run_dir="))], *schema)
    cfg.resume, cfg.run_dir = str(run_dir), str(run_dir)
    if not (run_dir / "checkpoints" / "latest.pt").is_file():
        raise UserError(f"{run_dir} has no checkpoints/latest.pt to resume from; start it again instead")
    return run_dir, cfg


def run_seed_list(command: str, overrides: list[str], seeds: list[int], jobs: int, steps: int, name: str,
                  run_dir: str | None) -> int:
    """Several seeds of one validated configuration (robot_rl.seeds): one process per seed, then statistics."""
    from robot_rl.seeds import describe, run_seeds

    if setting(overrides, "resume") is not None:
        raise UserError("with a seed list, run the same command again to continue (not resume=)")
    base = Path(run_dir) if run_dir else default_run_dir(f"{name}-seeds")
    rest = [o for o in overrides if not o.startswith("run_dir=")]
    summary = run_seeds(command, rest, seeds, jobs, base, steps)
    print(describe(summary), flush=True)
    print(f"statistics: {base / 'seeds.json'} | curves: {base / 'curves.png'}", flush=True)
    return 1 if summary["failed_seeds"] else 0


# -- key=value into a dataclass -----------------------------------------------------------------------------
def _dotted_keys(schema: type, prefix: str = "") -> list[str]:
    """Every key of a command's dataclass, dotted (`env.num_envs`), for "did you mean" hints."""
    keys = []
    for f in dataclasses.fields(schema):
        keys.append(prefix + f.name)
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if dataclasses.is_dataclass(default):
            keys += _dotted_keys(type(default), f"{prefix}{f.name}.")
    return keys


def _is_text_key(cls: type, key: str) -> bool:
    """Is `key` (dotted) a `str` or `str | None` field of the dataclass `cls`?"""
    node: Any = cls
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


def parse_args(cls: type, args: list[str], command: str) -> Any:
    """`key=value` settings into the dataclass `cls`; a mistake raises a one-line UserError naming the key.

    Values are YAML (numbers, true/false, null, [lists]) except for text keys, which take the text as typed: a
    token or path such as 0123 stays 0123."""
    from omegaconf import OmegaConf

    from robot_rl.config import _keys_under, renamed_agent_overrides

    args = renamed_agent_overrides(args)  # hil-train's agent.<old flat key>, as train's and finetune's
    check_overrides(args, command)
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
