"""Output that can never stall the robot: log lines through a queue, and a process's stdout/stderr through a pump.

Why: writing to a terminal or a pipe blocks when nobody reads it: a terminal paused with Ctrl-S, a stalled ssh
session, stderr on a pipe whose reader hung. Before this module the control loop logged (a watchdog trip, a soft
breach) while it held the server's lock, and gRPC's polling thread logged when an e-stop latched; one blocked write
then froze the loop (no ``hold()``, no ``stop()``), every ``EStop`` and ``GetStatus``, and the health field that
should have said so. Two layers keep output off those paths:

* ``LogQueue``: the control loop and gRPC's polling thread hand log records to a bounded queue (never waiting);
  one thread of its own passes them to ``logging``. If that thread is blocked by its output, the queue fills and
  further records are dropped and counted (``dropped``, reported as ``GetStatus.rejected["log_dropped"]``) instead
  of blocking anyone. The robot-side library guarantees this wherever it runs.
* ``OutputPump``: for a process that owns its terminal (``serve-robot``), file descriptors 1 and 2 are replaced by
  pipes that a reader thread always drains into bounded buffers, and a writer thread per stream copies them to the
  real terminal or pipe. Any writer in the process (Python's ``print`` and ``logging``, gRPC's C core, a child
  process that inherited the descriptors) therefore writes into a pipe that is always being read, and output that
  the real destination cannot take is dropped and counted, never queued without bound. Writers can wait only for
  the reader thread to be scheduled, which never waits on the terminal.
"""

from __future__ import annotations

import fcntl
import logging
import os
import queue
import struct
import termios
import threading
import time
from collections import deque
from typing import Any

__all__ = ["LogQueue", "OutputPump"]


class LogQueue:
    """Non-blocking logging for threads that must never wait on I/O (module docstring).

    ``warning``/``error``/``info`` queue a record and return at once; ``close`` flushes what the thread can write
    within ``timeout_s`` and stops it.
    """

    def __init__(self, logger: logging.Logger, capacity: int = 1000) -> None:
        self.logger = logger
        self._queue: queue.Queue[tuple[int, str, tuple[Any, ...], Any] | None] = queue.Queue(capacity)
        self._lock = threading.Lock()
        self.dropped = 0
        self._thread = threading.Thread(target=self._run, name="bridge-log", daemon=True)
        self._thread.start()

    def log(self, level: int, msg: str, *args: Any, exc_info: Any = None) -> None:
        try:
            self._queue.put_nowait((level, msg, args, exc_info))
        except queue.Full:
            with self._lock:
                self.dropped += 1

    def info(self, msg: str, *args: Any) -> None:
        self.log(logging.INFO, msg, *args)

    def warning(self, msg: str, *args: Any) -> None:
        self.log(logging.WARNING, msg, *args)

    def error(self, msg: str, *args: Any, exc_info: Any = None) -> None:
        self.log(logging.ERROR, msg, *args, exc_info=exc_info)

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop the thread after the queued records (at most ``timeout_s``: a blocked output keeps the rest)."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            level, msg, args, exc_info = item
            try:
                self.logger.log(level, msg, *args, exc_info=exc_info)
            except Exception:  # a broken handler must not end the thread; logging reports its own errors
                pass


class _Stream:
    """One redirected descriptor: pipe -> reader thread -> bounded buffer -> writer thread -> the original target."""

    def __init__(self, fd: int, capacity: int) -> None:
        self.fd, self.capacity = fd, capacity
        self.target = os.dup(fd)  # where the output really goes (terminal, file, pipe)
        read_end, write_end = os.pipe()
        try:  # a larger pipe absorbs bursts while the reader thread waits for a CPU (Linux; best effort)
            fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 1 << 20)
        except OSError:
            pass
        os.dup2(write_end, fd)
        os.close(write_end)
        self.read_end = read_end
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.dropped = 0
        self.cv = threading.Condition()
        self.closed = False
        self.reader = threading.Thread(target=self._read, name=f"output-pump-read-{fd}", daemon=True)
        self.writer = threading.Thread(target=self._write, name=f"output-pump-write-{fd}", daemon=True)
        self.reader.start()
        self.writer.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.read_end, 65536)
            except OSError:
                data = b""
            with self.cv:
                if not data:
                    self.closed = True
                    self.cv.notify_all()
                    return
                if self.buffered + len(data) > self.capacity:
                    self.dropped += len(data)  # the destination is not keeping up: drop, never block the writers
                else:
                    self.chunks.append(data)
                    self.buffered += len(data)
                    self.cv.notify_all()

    def _write(self) -> None:
        while True:
            with self.cv:
                while not self.chunks and not self.closed:
                    self.cv.wait()
                if not self.chunks:
                    return
                data = self.chunks[0]
            view = memoryview(data)
            while view:  # may block for as long as the destination does; only this thread waits
                try:
                    view = view[os.write(self.target, view):]
                except OSError:
                    break
            with self.cv:
                self.chunks.popleft()
                self.buffered -= len(data)
                self.cv.notify_all()

    def restore(self, timeout_s: float) -> bool:
        """Put the original descriptor back once what is buffered has been written (within ``timeout_s``); if the
        destination is still blocked, leave the pump in place (later writes must not block either) and say so."""
        def empty() -> bool:  # nothing buffered here and nothing left in the pipe for the reader thread
            try:
                pending = struct.unpack("i", fcntl.ioctl(self.read_end, termios.FIONREAD, b"\0\0\0\0"))[0]
            except OSError:
                pending = 0
            return not self.chunks and pending == 0

        deadline = time.monotonic() + timeout_s
        drained = False
        while time.monotonic() < deadline:
            with self.cv:
                if empty():
                    drained = True
                    break
                self.cv.wait(0.01)
        if not drained:
            return False
        os.dup2(self.target, self.fd)  # drops this process's write end: the reader ends once children let go too
        # A chunk the reader had taken from the pipe but not yet queued is invisible to empty(): wait for the reader's
        # end of file and the writer's last write, so that nothing written before this call is lost at exit.
        self.writer.join(max(deadline - time.monotonic(), 0.5))
        return True


class OutputPump:
    """Replace stdout and stderr (descriptors 1 and 2) of this process with always-drained pipes (module docstring).

    Use it in a command that serves a robot, before starting anything that writes: ``with OutputPump(): ...``.
    ``dropped`` counts the bytes the real destinations could not take (buffer full, ``capacity`` bytes per stream).
    """

    def __init__(self, capacity: int = 1 << 20, fds: tuple[int, ...] = (1, 2)) -> None:
        self.capacity, self.fds = capacity, fds
        self._streams: list[_Stream] = []

    def start(self) -> OutputPump:
        import sys

        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                pass
        self._streams = [_Stream(fd, self.capacity) for fd in self.fds]
        return self

    @property
    def dropped(self) -> int:
        return sum(s.dropped for s in self._streams)

    def stop(self, timeout_s: float = 1.0) -> bool:
        """Give the descriptors back once drained; False (pump left in place) where a destination stayed blocked."""
        import sys

        for f in (sys.stdout, sys.stderr):
            try:
                f.flush()
            except (OSError, ValueError):
                pass
        kept = [s for s in self._streams if not s.restore(timeout_s)]
        self._streams = kept
        return not kept

    def __enter__(self) -> OutputPump:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
