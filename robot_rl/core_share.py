"""How runs on one machine share its cores: each run that left `threads=` unset takes an equal share of the cores
among the robot-rl runs alive on the machine, and takes a new share while it runs as others start and end.

Why: torch's default is one thread per core, and a run's threads wait for each other at every op. Two runs started
together on 2 cores with 2 threads each ran several times slower than with one thread each (issue 57), and the
load average (`device.choose_threads`) cannot see a run that starts at the same moment, nor tell a run that
started first to give a core back. So each run writes its process id into a shared directory (one empty file
per run, removed at exit; files of processes that died are ignored and removed), counts the live runs every few
seconds, and sets torch's threads to `cores // runs`, at least 1 and at most torch's default. Work that is not
a registered run (a benchmark, a test suite) still counts through the load average, as at start: each file holds
its run's thread count, so the load the registered runs do not explain is the others' (less one core each).

A run that asked for `threads=N` keeps N and is not counted: the user decided for it.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

__all__ = ["CoreShare", "runs_dir"]


def runs_dir() -> Path:
    """The directory where this user's runs register (`ROBOT_RL_RUNS_DIR` overrides it, for tests)."""
    if override := os.environ.get("ROBOT_RL_RUNS_DIR"):
        return Path(override)
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"robot_rl-{uid}" / "runs"


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:  # not on this platform
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


class CoreShare:
    """This process's registration among the machine's runs.

    `start_threads` is what the run chose at start (`device.choose_threads`); `default` the most it ever takes
    (torch's default); `cores` the CPUs this process may use; `load` returns the 1-minute load average (tests pass
    their own). `threads()` is the share now; `rebalance()` applies a changed share to torch and returns it (None
    when unchanged or checked less than `every_s` ago)."""

    def __init__(self, start_threads: int, default: int, cores: int | None = None, directory: Path | None = None,
                 every_s: float = 5.0, load: Callable[[], float] | None = None) -> None:
        if cores is None:
            cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        self.default, self.cores, self.every_s = default, cores, every_s
        self.directory = directory or runs_dir()
        self._load = load or _load_average
        self.current = start_threads
        self._next_check = 0.0
        self._file: Path | None = None
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._file = self.directory / str(os.getpid())
            self._write()
            atexit.register(self.close)
        except OSError:  # a read-only temp dir: the run keeps its start-time choice
            self._file = None

    def settle(self, threads: int) -> None:
        """Record `threads` as what this run uses (the caller has set torch's count)."""
        self.current = threads
        if self._file is not None:
            self._write()

    def _write(self) -> None:
        assert self._file is not None
        tmp = self._file.with_name(f".{self._file.name}.tmp")  # never a half-written count for a reader
        tmp.write_text(str(self.current))
        tmp.replace(self._file)

    def live_runs(self) -> list[int]:
        """The thread counts of the registered runs whose process is alive, this one included (files of dead
        processes are removed)."""
        counts = []
        try:
            entries = list(self.directory.iterdir())
        except OSError:
            return [self.current]
        for entry in entries:
            try:
                pid = int(entry.name)
            except ValueError:
                continue
            if not _alive(pid):
                entry.unlink(missing_ok=True)
                continue
            try:
                counts.append(max(1, int(entry.read_text() or 1)))
            except (OSError, ValueError):  # removed or being replaced just now: one thread
                counts.append(1)
        return counts or [self.current]

    def threads(self) -> int:
        """This run's share of the cores now."""
        if self._file is None:
            return self.current
        runs = self.live_runs()
        share = self.cores // len(runs)
        load = self._load()
        if load is not None:  # what the registered runs do not explain is other work, which keeps its cores
            other = max(0.0, load - sum(runs))
            share = min(share, int(self.cores - other + 0.5))
        return max(1, min(self.default, share))

    def rebalance(self, now: float | None = None) -> int | None:
        """Check the share at most every `every_s` seconds; set torch's threads and return the new count when it
        changed, else None. Cheap enough for every step of a run's loop."""
        now = time.monotonic() if now is None else now
        if now < self._next_check:
            return None
        self._next_check = now + self.every_s
        share = self.threads()
        if share == self.current:
            return None
        import torch

        torch.set_num_threads(share)
        self.settle(share)
        return share

    def close(self) -> None:
        """Leave the machine's count (at exit, or when the run ends)."""
        if self._file is not None:
            self._file.unlink(missing_ok=True)
            self._file = None
