"""SIGTERM handled like Ctrl-C, for every long-running command.

Schedulers (SLURM, systemd, Kubernetes, `kill`) stop a process with SIGTERM. Python's default is to die at once,
which skips every `finally`: a training run loses everything since its last periodic checkpoint, a recording
loses its open episode, a robot command does not hold the robot. Inside `sigterm_as_interrupt()` SIGTERM raises
`Terminated`, a `KeyboardInterrupt`, so the command's existing Ctrl-C path (save, hold, close) runs instead.

A training loop stops between steps instead (`stop_between_steps`): an interrupt raised at an arbitrary point can
land inside a library (a module half imported, TensorBoard's writer mid-flush), and a process that left one that
way could abort at exit (exit status -6 instead of 130, seen once in CI).
"""

from __future__ import annotations

import _thread
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["StopRequest", "Terminated", "interrupts_deferred", "sigterm_as_interrupt", "stop_between_steps"]


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


class StopRequest:
    """A Ctrl-C or SIGTERM that arrived inside `stop_between_steps`, held until the loop asks (`check`)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def check(self) -> None:
        """Raise the held interrupt (`Terminated` for SIGTERM, `KeyboardInterrupt` for Ctrl-C), if one arrived."""
        if self.signum is not None:
            raise Terminated() if self.signum == signal.SIGTERM else KeyboardInterrupt()


@contextmanager
def stop_between_steps(grace_s: float = 10.0) -> Iterator[StopRequest]:
    """For the duration, Ctrl-C and SIGTERM only request a stop, which the loop honours at its next `check()` (a
    step boundary), so no library call is cut in half. A second Ctrl-C or SIGTERM, or `grace_s` seconds without a
    `check` (a long evaluation, a robot that stopped answering), interrupts at once as before. Off the main thread
    this does nothing, as `sigterm_as_interrupt`."""
    request = StopRequest()
    if threading.current_thread() is not threading.main_thread():
        yield request
        return
    timers: list[threading.Timer] = []

    def request_stop(signum: int, frame: Any) -> None:
        if request.signum is not None:  # asked twice, or the grace ran out: now
            raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()
        request.signum = signum
        timer = threading.Timer(grace_s, _thread.interrupt_main, args=(signum,))
        timer.daemon = True  # never what keeps a finished process alive
        timers.append(timer)
        timer.start()

    previous = {s: signal.signal(s, request_stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield request
    finally:
        for timer in timers:
            timer.cancel()
        for s, handler in previous.items():
            signal.signal(s, handler)
