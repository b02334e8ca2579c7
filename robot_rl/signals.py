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

__all__ = ["Terminated", "interrupts_deferred", "sigterm_as_interrupt"]


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


@contextmanager
def interrupts_deferred() -> Iterator[None]:
    """For the duration, Ctrl-C (SIGINT) and SIGTERM are held: one that arrives is delivered again when the block
    ends, to the handlers that were in place (so it raises there, as it would have inside).

    For bookkeeping that must not stop half done: a robot session that has counted a step but not yet handed its
    transition to the learner would lose it (the learner's count then trails the run's by two, not one). Off the
    main thread this does nothing, as `sigterm_as_interrupt`.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: Any) -> None:
        caught.append(signum)

    previous = {s: signal.signal(s, hold) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for s in dict.fromkeys(caught):  # each signal once, in the order they came
            signal.raise_signal(s)
