"""The torch device a run asks for (`device=`), checked before anything is built; and whether this CPU does
bfloat16 in hardware, which `agent.optimiser.bf16` needs to be faster rather than many times slower."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from robot_rl.errors import UserError

__all__ = ["DeviceError", "bf16_cpu_hint", "bf16_cpu_warning", "check_torch_device", "choose_threads",
           "cpu_has_native_bf16", "fit_default_replay_capacity"]


class DeviceError(UserError, ValueError):
    """`device=` names no torch device this process can use; the message says which to use instead."""


def check_torch_device(device: str) -> None:
    """`device=` names a torch device this process can use, or one line says which to use instead."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise DeviceError(f"device={device}: not a torch device; use cpu, cuda, cuda:<index> or mps") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}"
            raise DeviceError(f"device={device}: no CUDA GPU is usable here (torch {torch.__version__}, {build}); "
                              f"use device=cpu, or install a CUDA build of torch on a machine with a GPU")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise DeviceError(f"device={device}: this machine has {torch.cuda.device_count()} CUDA device(s); "
                              f"use cuda:0..cuda:{torch.cuda.device_count() - 1}")
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise DeviceError(f"device={device}: Apple's MPS is not available here; use device=cpu")
    elif dev.type not in {"cpu", "cuda", "mps"}:
        raise DeviceError(f"device={device}: robot-rl runs on cpu, cuda or mps")


def choose_threads(requested: int | None, default: int | None = None, cores: int | None = None,
                   load: float | None = None) -> tuple[int, str | None]:
    """The torch CPU threads for a run that left `threads=` unset (`requested` None), and a notice when that is not
    torch's default.

    Why: torch's default (one thread per core) makes a run 5-10x slower when other processes keep the cores busy,
    because its threads wait for each other at every op (measured on 2 cores beside other runs: 148-247 s against
    24-28 s with threads=1, issue 56). So where the other work on the machine (the 1-minute load average) leaves
    fewer free cores than torch would use, the run takes the free cores, at least one, and says so. A `requested`
    count is always kept. `default`, `cores` and `load` are for tests (default: torch's, this process's CPUs, and
    os.getloadavg())."""
    import os

    import torch

    if requested:
        return requested, None
    default = default or torch.get_num_threads()
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if load is None:
        try:
            load = os.getloadavg()[0]
        except OSError:  # not on this platform: keep torch's default
            return default, None
    free = max(1, int(cores - load + 0.5))
    if free >= default:
        return default, None
    return free, (f"threads={free}: other processes keep this machine busy (load {load:.1f} on {cores} cores), where "
                  f"torch's default of {default} threads would wait on each other and run several times slower; "
                  "set threads= to choose")


# The x86 flags of CPUs that multiply bfloat16 in hardware. Without them (an AVX2-only CPU such as many AMD EPYC
# VMs) torch's bf16 matmuls are emulated: measured 40.9 ms against fp32's 0.47 ms for a 256x128 @ 128x512 matmul on
# an AVX2 EPYC, one thread, and the default agent's update 15x slower (bench/README.md, "bf16 on a CPU without bf16
# hardware").
_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def cpu_has_native_bf16(cpuinfo: str | None = None) -> bool | None:
    """Whether this CPU does bfloat16 matmuls in hardware (an AVX512-BF16 or AMX-BF16 flag in /proc/cpuinfo); None
    where the flags cannot be read (not Linux, not x86), so the caller says nothing rather than guess."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo") as f:
                cpuinfo = f.read()
        except OSError:
            return None
    flags = next((line.split(":", 1)[1].split() for line in cpuinfo.splitlines() if line.startswith("flags")), None)
    if flags is None:
        return None
    return any(flag in flags for flag in _BF16_FLAGS)


def bf16_cpu_warning(cpuinfo: str | None = None) -> str | None:
    """One line for a run that asks for bfloat16 on a CPU that emulates it (an update 15x slower than fp32), else
    None. A warning, not an error: the run is correct, only slow, and tests of bf16 must still run anywhere."""
    if cpu_has_native_bf16(cpuinfo) is not False:
        return None
    return ("agent.optimiser.bf16=true on a CPU without bfloat16 hardware (no avx512_bf16 or amx_bf16 flag in "
            "/proc/cpuinfo): its bf16 matmuls are emulated and an update is many times slower than in fp32 (15x measured); set "
            "agent.optimiser.bf16=false (fp32), or use a CPU with AVX512-BF16/AMX or a GPU")


# Below this many env steps torch.compile's first-call compilation (about a minute) eats what bf16 saves.
BF16_HINT_MIN_STEPS = 50_000


def bf16_cpu_hint(device: str, bf16: bool, steps: int, cpuinfo: str | None = None) -> str | None:
    """One line for a long fp32 run on a CPU that multiplies bfloat16 in hardware, else None. Measured on an
    AVX512-BF16 EPYC (bench/README.md): compile + bf16 ran the one-critic agent's HalfCheetah and walker-walk runs
    in 1.24-1.35x SB3's wall time against 1.9x in fp32 (1.5x faster), returns as high over 3 and 5 seeds. It stays
    a hint, not the default: the same switch is 15x slower on CPUs without those instructions, and fp32 is what
    the presets' seeded figures were measured with."""
    if bf16 or steps < BF16_HINT_MIN_STEPS or not device.startswith("cpu") or not cpu_has_native_bf16(cpuinfo):
        return None
    return ("hint: this CPU multiplies bfloat16 in hardware; agent.optimiser.compile=true agent.optimiser.bf16=true "
            "made long runs about 1.5x faster at the same returns (one critic, HalfCheetah and walker-walk: bench/README.md)")


DEFAULT_REPLAY_SHARE = 0.5  # of the available memory a replay the user did not size may take by default


def fit_default_replay_capacity(
    capacity: int, obs_spec: Mapping[str, tuple[tuple[int, ...], Any]], action_dim: int, device: str,
    frames: Sequence[str] = (), episode_steps: int | None = None, key: str = "train.replay_capacity",
    message: Callable[[str], None] = print,
) -> int:
    """`capacity`, or for the schema's default (1M transitions, which a camera task needs ~43 GB for) that would
    not fit in `device`'s memory, the capacity that `DEFAULT_REPLAY_SHARE` of the available memory holds, with a
    one-line notice saying so and which key sets it. The user asked for no size, so a run that fits beats an error
    (`robot-rl train env.spec=arm:reach-pixels` stopped at once); a capacity the user or a preset chose is kept
    and `robot_rl.replay.check_fits` still refuses it in one line when it does not fit."""
    import dataclasses

    import torch

    from robot_rl.config import LoopConfig
    from robot_rl.replay import MEMORY_HEADROOM, available_memory, bytes_per_transition

    default = next(f.default for f in dataclasses.fields(LoopConfig) if f.name == "replay_capacity")
    if capacity != default:
        return capacity
    available = available_memory(torch.device(device))
    per = bytes_per_transition(obs_spec, action_dim, frames, episode_steps)
    if available is None or capacity * per <= MEMORY_HEADROOM * available:
        return capacity
    fits = int(DEFAULT_REPLAY_SHARE * available // per)
    if fits >= 100:  # two significant digits, rounded down
        step = 10 ** (len(str(fits)) - 2)
        fits = fits // step * step
    if fits < 1000:  # too small to learn from: the check's one-line error says what it would need
        return capacity
    message(f"{key}: the default {capacity:,} transitions would need {capacity * per / 1e9:.1f} GB of {device} memory "
            f"({per:,} bytes each) and {available / 1e9:.1f} GB is available; using {fits:,} (half of it). Set "
            f"{key}=N to choose")
    return fits
