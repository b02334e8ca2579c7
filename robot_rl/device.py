"""The torch device a run asks for (`device=`), checked before anything is built."""

from __future__ import annotations

__all__ = ["DeviceError", "check_torch_device"]


class DeviceError(ValueError):
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
