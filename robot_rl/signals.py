"""SIGTERM handled like Ctrl-C, for every long-running command.

Schedulers (SLURM, systemd, Kubernetes, `kill`) stop a process with SIGTERM. Python's default is to die at once,
which skips every `finally`: a training run loses everything since its last periodic checkpoint, a recording
loses its open episode, a robot command does not hold the robot. Inside `sigterm_as_interrupt()` SIGTERM raises
`Terminated`, a `KeyboardInterrupt`, so the command's existing Ctrl-C path (save, hold, close) runs instead.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Terminated", "sigterm_as_interrupt"]


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C would be."""


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """For the duration, SIGTERM raises `Terminated` in the main thread; the previous handler comes back after.

    Off the main thread (a command run from a test's or an application's worker thread) signals cannot be
    handled there, so this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
