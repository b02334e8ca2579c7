"""Saved policies: a directory with `model.safetensors` (weights and normaliser statistics) and `config.json`.

Every kind of result saves this way (`POLICY_CLASSES`): behaviour cloning and ReinFlow/DPPO (`MLPPolicy`,
`DiffusionPolicy`, `FlowPolicy`), SAC actors (`ActorPolicy`), residual RL (`ResidualPolicy`) and DSRL
(`NoiseSteeredPolicy`); `robot-rl export` writes any run as one, optionally with `policy.onnx` beside it
(`robot_rl.policies.onnx`).

`config.json` names the class and its constructor keyword arguments, so `load_policy` rebuilds the module
from this package alone (no training code, no pickle): deployment needs `policies`, torch and safetensors.

    {"format": "robot_rl.policy", "format_version": 1, "class": "DiffusionPolicy",
     "kwargs": {"obs_dim": 29, "action_dim": 4, "horizon": 8, ...}, "metadata": {...}}

`save_policy` writes into a temporary sibling directory and renames it into place, so `path` holds either
the previous complete policy or the new one, never a mix. Replacing an existing policy is two renames (old
aside, new in); a crash between them leaves the new policy in `.<name>.tmp-<pid>` and the old one in
`.<name>.old-<pid>`, both complete.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from robot_rl.policies.actor_policy import ActorPolicy
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.composed import NoiseSteeredPolicy, ResidualPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy

from robot_rl.errors import UserError

FORMAT = "robot_rl.policy"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"
# Every saved policy has obs_dim, action_dim, config(), act(obs, deterministic, noise) -> [N, A] and reset(env_ids).
SavedPolicy = ChunkPolicy | ActorPolicy | ResidualPolicy | NoiseSteeredPolicy
POLICY_CLASSES: dict[str, type[SavedPolicy]] = {
    cls.__name__: cls
    for cls in (MLPPolicy, DiffusionPolicy, FlowPolicy, ActorPolicy, ResidualPolicy, NoiseSteeredPolicy)
}


class PolicyFormatError(UserError, ValueError):
    """A saved policy is missing, damaged or of an unknown kind; the message names the path."""


def save_policy(
    policy: SavedPolicy,
    path: str | os.PathLike[str],
    metadata: dict[str, Any] | None = None,
    extra_files: dict[str, str | os.PathLike[str]] | None = None,
) -> Path:
    """Write `policy` to the directory `path` atomically (module docstring); returns the path.

    `metadata` (JSON-serialisable) is stored in config.json beside the class, e.g. the training dataset.
    `extra_files` {name: file} are moved into the directory with it (e.g. `policy.onnx`), inside the same atomic
    replacement, so an exported graph never sits beside weights it was not made from.
    """
    name = type(policy).__name__
    if POLICY_CLASSES.get(name) is not type(policy):
        raise TypeError(
            f"cannot save {name}: not one of the registered policies ({', '.join(POLICY_CLASSES)})"
        )
    path = Path(path)
    if path.exists() and not (path / CONFIG).is_file() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path}: exists and is not a saved policy; refusing to replace it")
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "class": name,
        "kwargs": policy.config(),
        "metadata": metadata or {},
    }
    text = json.dumps(config, indent=2)  # fails here, before anything is written, if not serialisable
    aliases = _aliases(policy.state_dict())
    tensors = {k: v.detach().to("cpu").contiguous() for k, v in policy.state_dict().items() if k not in aliases}

    return write_directory(path, tensors, text, {"format": FORMAT, "class": name}, extra_files)


def _aliases(state: dict[str, torch.Tensor]) -> dict[str, str]:
    """{name: first name} for the entries of a state dict that are another entry's tensor (a module used in two
    places, as one frozen backbone under several cameras): stored once, as safetensors requires, and restored from
    that one at load."""
    first: dict[tuple[int, int, tuple[int, ...]], str] = {}
    aliases = {}
    for name, t in state.items():
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key in first:
            aliases[name] = first[key]
        else:
            first[key] = name
    return aliases


def write_directory(
    path: Path,
    tensors: dict[str, torch.Tensor],
    config_text: str,
    weights_metadata: dict[str, str],
    extra_files: dict[str, str | os.PathLike[str]] | None = None,
) -> Path:
    """Write `model.safetensors` (`tensors`) and `config.json` (`config_text`) as the directory `path`, atomically
    (module docstring); shared by saved policies and reward classifiers (`robot_rl.classifier`)."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    old = path.parent / f".{path.name}.old-{os.getpid()}"
    for leftover in (tmp, old):
        shutil.rmtree(leftover, ignore_errors=True)
    tmp.mkdir()
    moved_aside = False
    try:
        save_file(tensors, str(tmp / WEIGHTS), metadata=weights_metadata)
        (tmp / CONFIG).write_text(config_text + "\n", encoding="utf-8")
        for extra, source in (extra_files or {}).items():
            os.replace(source, tmp / extra)
        for f in (tmp / WEIGHTS, tmp / CONFIG, *(tmp / extra for extra in extra_files or {}), tmp):
            _fsync(f)
        if path.exists():
            os.replace(path, old)
            moved_aside = True
        os.replace(tmp, path)
        _fsync(path.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if moved_aside and not path.exists():
            os.replace(old, path)  # put the previous policy back
        raise
    shutil.rmtree(old, ignore_errors=True)
    return path


def load_policy(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> SavedPolicy:
    """Rebuild a saved policy on `device`, in eval mode with empty action queues.

    Raises `PolicyFormatError` for a missing directory or file, unreadable JSON or weights, an unknown class
    or format version, or weights that do not fit the configured module.
    """
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_dir():
        raise PolicyFormatError(f"{path}: no such policy directory (expected {CONFIG} and {WEIGHTS} in it)")
    config_path, weights_path = path / CONFIG, path / WEIGHTS
    if not config_path.is_file() and (path / "policy" / CONFIG).is_file():  # a bc/finetune run directory
        raise PolicyFormatError(f"{path} is a run directory; its policy is {path / 'policy'}")
    for f in (config_path, weights_path):
        if not f.is_file():
            raise PolicyFormatError(f"{f}: missing; {path} is not a complete saved policy")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PolicyFormatError(f"{config_path}: not valid JSON ({e}); the policy is damaged") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise PolicyFormatError(f'{config_path}: not a {FORMAT} config (no "format": "{FORMAT}")')
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise PolicyFormatError(
            f"{config_path}: format_version {version!r}; this code reads versions up to {FORMAT_VERSION}"
        )
    name = config.get("class")
    if name not in POLICY_CLASSES:
        raise PolicyFormatError(
            f"{config_path}: unknown policy class {name!r}; known: {', '.join(POLICY_CLASSES)}"
        )
    try:
        policy = POLICY_CLASSES[name](**config.get("kwargs", {}))
    except (TypeError, ValueError) as e:
        raise PolicyFormatError(f"{config_path}: cannot build {name} from its kwargs ({e})") from None
    try:
        state = load_file(str(weights_path), device="cpu")
    except Exception as e:  # safetensors raises its own error types for truncated or garbled files
        raise PolicyFormatError(f"{weights_path}: unreadable weights ({e}); the policy is damaged") from None
    state.update({alias: state[name] for alias, name in _aliases(policy.state_dict()).items() if name in state})
    try:
        policy.load_state_dict(state, strict=True)
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        raise PolicyFormatError(
            f"{weights_path}: weights do not fit {name} as configured ({first})"
        ) from None
    return policy.to(device).eval()


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The `metadata` stored with a saved policy (without loading the weights)."""
    try:
        return dict(json.loads((Path(path) / CONFIG).read_text(encoding="utf-8")).get("metadata", {}))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, AttributeError) as e:
        raise PolicyFormatError(f"{Path(path) / CONFIG}: unreadable ({e})") from None


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
