"""The robot server's control loop: the one thread that talks to the driver, with explicit states.

One thread calls the driver at a fixed rate (``spec.control_hz``). Each tick it

* applies the command queued since the last tick, after the safety filter (``robot_rl.real.safety``) has clamped it
  against the state measured *at this tick* and the speed governor (``robot_rl.real.governor``) has scaled it so
  that the *measured* hand speed stays within the stated limit; or, when none was queued, calls ``driver.hold()``
  (so a client that stops talking can never leave the arm moving);
* hands the measured state to the **supervisor** (``robot_rl.real.supervisor``);
* trips the **watchdog** when neither a command nor a heartbeat has arrived for ``watchdog_s``;
* runs a **reset** as a motion: the hand is driven to the driver's ``reset_position`` within the speed limits, one
  tick at a time under the supervisor, and only then is the driver reset (a new **episode**);
* measures its own timing: jitter (tick start minus its schedule), work per tick, overruns, queueing delay.

States (``LoopState``) and what moves between them:

=================  ====================================================================  ==========================
state              entered when                                                          left when
=================  ====================================================================  ==========================
``running``        start; a command applied while ``holding``; a supervisor hold         watchdog, breach, e-stop
                   settled; the e-stop cleared
``holding``        no command or heartbeat for ``watchdog_s`` (counted)                  the next command
``supervisor_hold``  a soft breach of the measured limits (commands refused)             ``settle_ticks`` clean
                                                                                         ticks; or after
                                                                                         ``max_hold_s``: e-stop
``estop``          an ``EStop`` (at its headers), a hard breach, a driver fault, a hold  ``ClearEStop`` admitted
                   that did not settle, the server shutting down                         after the latest e-stop
                                                                                         request
``dead``           anything other than a driver fault escaped a tick (a bug)            never
=================  ====================================================================  ==========================

A reset in progress is reported as ``resetting`` while the state is ``running`` or ``holding``.

**E-stop.** Every e-stop request (an ``EStop``'s headers, a hard breach, a driver fault) gets a generation number,
fails any queued command or reset at once (error status, never OK), and wakes the loop, which calls
``driver.stop()`` between ticks and acknowledges every request up to that generation. One ``EStop`` call is one
request: its body does not request a second stop. While the latch holds the robot only holds, so the driver's
``stop()`` is called again at most every ``restop_interval_s`` however many requests arrive (a stalled-headers
flood from a token holder once drove 180 calls a second). A ``ClearEStop`` carries the generation current when its
headers arrived (its admission) and clears the latch only if no e-stop was requested since: a clear delayed in the
network can never undo a later e-stop (it is answered ``FAILED_PRECONDITION``).

**I/O.** The loop never writes output itself: log lines go through ``robot_rl.real.output.LogQueue``, after the
stop they report, and never while the lock is held. A blocked terminal cannot stall a tick or an e-stop.

**Health.** Driver exceptions are driver faults (stop, latch, ``INTERNAL`` to the caller). Anything else that
escapes a tick ends the loop (state ``dead``): the driver is stopped, and from then on every call is refused with
the reason (``check_alive``).

**Priority.** The control thread asks the OS for real-time scheduling (``control_priority``; granted to root or
with CAP_SYS_NICE, else nice -10 if allowed) and reports what it got (``loop_priority``).
"""

from __future__ import annotations

import enum
import os
import threading
import time
from typing import TYPE_CHECKING, Any

import grpc
import numpy as np

from .guard import Refusals, safe_text
from .output import LogQueue
from .proto import pb
from .robot import Robot, RobotObservation
from .safety import CLAMP_GOVERNOR, SafetyFilter, UnsafeCommand
from .supervisor import Breach, Supervisor

if TYPE_CHECKING:
    from .server import ServerConfig

__all__ = ["CallError", "ControlLoop", "LoopState", "Pending"]

TIMING_WINDOW = 30_000  # samples kept for percentiles (10 minutes at 50 Hz)
HEADER_REASON = "EStop call (reason not received yet)"


class LoopState(str, enum.Enum):
    """The control loop's states (module docstring); the value is what ``GetStatus.state`` reports."""

    RUNNING = "running"
    HOLDING = "holding"
    SUPERVISOR_HOLD = "supervisor_hold"
    ESTOP = "estop"
    DEAD = "dead"


class CallError(Exception):
    """A call refused or failed with a gRPC status and a message that says why."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


class _DriverFault(Exception):
    """An exception raised by the driver (as opposed to a bug in the loop)."""


# The answer to a command withdrawn from the queue because its caller's deadline passed before any tick took it.
_NOT_EXECUTED = (grpc.StatusCode.DEADLINE_EXCEEDED, "no control tick before the deadline; not executed", "deadline")


class Pending:
    """A request waiting for its control tick: ``kind`` is ``step``, ``hold`` or ``reset``. ``episode`` is the
    episode the caller believes it is in (None: no claim)."""

    __slots__ = ("kind", "action", "seed", "seq", "episode", "arrived", "expires", "done", "reply", "error", "images")

    def __init__(self, kind: str, action: np.ndarray | None = None, seed: int | None = None, seq: int = 0,
                 episode: int | None = None) -> None:
        self.kind, self.action, self.seed, self.seq, self.episode = kind, action, seed, seq, episode
        self.arrived = time.monotonic()
        self.expires = float("inf")  # when its caller stops waiting (set by `submit`)
        self.done = threading.Event()
        self.reply: pb.StepReply | None = None
        self.error: tuple[grpc.StatusCode, str, str] | None = None  # code, details, refusal counter
        self.images: dict[str, np.ndarray] | None = None  # the reply's frames, encoded by the waiting worker

    def fail(self, code: grpc.StatusCode, details: str, reason: str) -> None:
        """Answer with an error (first answer wins) and release the waiting call."""
        if not self.done.is_set():
            self.error = (code, details, reason)
            self.done.set()


class _ResetJob:
    """A reset in progress: the hand is on its way to ``target`` (the driver's reset position)."""

    __slots__ = ("item", "target", "cancelled")

    def __init__(self, item: Pending, target: np.ndarray) -> None:
        self.item, self.target, self.cancelled = item, target, False


class Ring:
    """Fixed-size sample window written by one thread; readers copy it without a lock."""

    def __init__(self, size: int = TIMING_WINDOW) -> None:
        self._a = np.zeros(size)
        self._n = 0

    def append(self, x: float) -> None:
        self._a[self._n % len(self._a)] = x
        self._n += 1

    def values(self) -> np.ndarray:
        return self._a[: min(self._n, len(self._a))].copy()

    @property
    def count(self) -> int:
        return self._n

    def since(self, n0: int) -> np.ndarray:
        """The samples appended since ``count`` was ``n0`` (the most recent window's worth at most)."""
        n, size = self._n, len(self._a)
        idx = np.arange(max(n0, n - size), n) % size
        return self._a[idx].copy()


class ControlLoop:
    """The control thread of one ``RobotServer`` (module docstring). ``start(first_observation)`` starts it,
    ``close()`` ends it; the server's gRPC workers call ``submit``, ``touch``, ``request_estop``, ``estop``,
    ``wait_stopped``, ``clear_estop`` and ``snapshot``."""

    def __init__(self, robot: Robot, config: ServerConfig, safety: SafetyFilter, supervisor: Supervisor,
                 refusals: Refusals, log: LogQueue, governor: Any = None) -> None:
        self.robot, self.config = robot, config
        self.spec = robot.spec
        self.period = 1.0 / self.spec.control_hz
        self.safety, self.supervisor, self.governor = safety, supervisor, governor
        self.refusals, self.log = refusals, log
        self._lock = threading.Lock()
        self._pending: Pending | None = None
        self._current: Pending | None = None
        self._reset_job: _ResetJob | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

        self.state = LoopState.RUNNING
        self.estop_reason = ""
        self.hold_reason = ""
        self.loop_error = ""
        self.loop_priority = ""
        self.episode = 0  # completed resets since start: the episode a reply belongs to
        self._latch_owner: int | None = None
        self._estop_generation = 0  # e-stop requests so far, of any origin (ClearEStop's ordering)
        self._latch_serial = 0  # times the latch was set from unlatched (stop() coalescing)
        self._hold_since = 0.0
        self._clean_ticks = 0
        self._rebase_pending = False
        self._last_contact = time.monotonic()
        self._last_tick = time.monotonic()
        self._obs: RobotObservation | None = None
        self._rest_action = np.zeros(self.spec.action_dim)
        self._rest_action[3:] = np.asarray(self.spec.action_low, np.float64)[3:]  # gripper open on both drivers
        self._last_applied = self._rest_action.copy()
        self.counters = {"ticks": 0, "commands": 0, "holds": 0, "watchdog_trips": 0, "estops": 0, "overruns": 0,
                         "stops": 0, "resets": 0, "governed": 0}
        self.breaches: dict[str, int] = {}

        # Stop requests and the driver's acknowledgements (every request gets a number).
        self._ack = threading.Condition()
        self._stop_requested = 0
        self._stop_done = 0
        self._stop_error: str | None = None
        self._stop_requested_at = 0.0
        self._last_stop_at = -float("inf")  # when the last successful stop() returned
        self._last_stop_serial = -1  # the latch it stopped for
        self.estop_ack_s = 0.0
        self._dead = False

        self.jitter, self.work, self.queue = Ring(), Ring(), Ring()

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, first: RobotObservation) -> None:
        self._obs = first
        self.supervisor.rebase(first)
        if self.governor is not None:
            self.governor.rebase(first)
        self._last_contact = self._last_tick = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=f"control-loop-{id(self):x}", daemon=True)
        self._thread.start()

    def close(self, timeout_s: float = 5.0) -> bool:
        """End the thread; False if it is stuck in a driver call (then nobody else may call the driver)."""
        self._stop.set()
        self._wake.set()
        if self._thread is None:
            return True
        self._thread.join(timeout=timeout_s)
        stuck = self._thread.is_alive()
        self._thread = None
        return not stuck

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # -- called by gRPC workers and the polling thread ---------------------------------------------------------
    def touch(self) -> None:
        self._last_contact = time.monotonic()

    def check_alive(self) -> None:
        """Raise ``CallError(UNAVAILABLE)`` once the control loop has died."""
        if self.loop_error:
            self.refusals.add("loop_dead")
            raise CallError(grpc.StatusCode.UNAVAILABLE, f"the robot's control loop died ({self.loop_error}); the "
                                                         "driver was stopped; restart serve-robot")

    def estop_generation(self) -> int:
        """The number of e-stop requests so far: a ``ClearEStop`` admitted now clears only latches up to it."""
        with self._lock:
            return self._estop_generation

    def _withdraw_pending(self) -> None:
        """Take the queued command off the queue unexecuted and answer it DEADLINE_EXCEEDED (under ``_lock``), so
        that no later tick can execute a command its caller has stopped waiting for."""
        item, self._pending = self._pending, None
        assert item is not None
        item.fail(*_NOT_EXECUTED)

    def submit(self, item: Pending, timeout_s: float) -> Pending:
        """Queue ``item`` for the next tick and wait for it, at most ``timeout_s`` (then it is withdrawn, or for a
        reset the motion is abandoned and the robot holds). Returns the answered item (``reply`` and ``images``
        set); raises ``CallError`` with the reason otherwise."""
        self.check_alive()
        item.expires = time.monotonic() + timeout_s
        with self._lock:
            refusal = None
            stale = self._pending
            if stale is not None and stale.expires <= time.monotonic():
                # Its caller's deadline has passed but its waiting worker has not woken to withdraw it yet (a loaded
                # machine): withdraw it here, so the caller's retry is not refused as busy by a command nobody awaits.
                self._withdraw_pending()
            if self.state == LoopState.ESTOP and item.kind != "hold":
                refusal = (grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
            elif self.state == LoopState.SUPERVISOR_HOLD and item.kind != "hold":
                refusal = (grpc.StatusCode.UNAVAILABLE, self._hold_message(), "holding")
            elif item.kind == "step" and item.episode is not None and item.episode != self.episode:
                refusal = (grpc.StatusCode.FAILED_PRECONDITION,
                           f"episode changed: the robot was reset since this client's episode {item.episode} (now "
                           f"episode {self.episode}; another client reset it); not executed: reset before stepping",
                           "episode_changed")
            elif self._pending is not None or self._reset_job is not None:
                refusal = (grpc.StatusCode.RESOURCE_EXHAUSTED,
                           "busy: a reset is in progress" if self._reset_job is not None else
                           "a command is already queued for this tick (one client at a time)", "busy")
            else:
                self._pending = item
        if refusal is not None:
            self.refusals.add(refusal[2])
            raise CallError(refusal[0], refusal[1])
        if not item.done.wait(timeout_s):
            with self._lock:
                job = self._reset_job
                if self._pending is item:  # never applied: withdraw it so a late tick cannot execute it
                    self._withdraw_pending()
                elif job is not None and job.item is item:
                    job.cancelled, self._reset_job = True, None
                    item.fail(grpc.StatusCode.DEADLINE_EXCEEDED,
                              "the reset did not reach the start position before the deadline; the robot holds "
                              "where it is", "deadline")
            # Being applied right now: the reply is moments away, unless the loop is stuck in a driver call.
            if not item.done.wait(max(1.0, 5 * self.period)):
                self.refusals.add("loop_stalled")
                raise CallError(grpc.StatusCode.UNAVAILABLE, "the control loop did not finish this tick in time "
                                                             "(stalled in a driver call?)")
        if item.error is not None:
            code, details, reason = item.error
            self.refusals.add(reason)
            raise CallError(code, details)
        assert item.reply is not None
        return item

    def _estop_message(self) -> str:
        return (f"e-stop latched ({self.estop_reason}); not executed; clear it with ClearEStop before commanding or "
                "resetting the robot")

    def _hold_message(self) -> str:
        return (f"supervisor hold ({self.hold_reason}); not executed; commands resume when the measured motion is "
                "back within limits")

    def request_estop(self, reason: str, owner: int | None = None) -> int:
        """Latch the e-stop (the first reason is kept), fail what is queued, and ask the loop to call
        ``driver.stop()`` now. Returns the request's number for ``wait_stopped`` (0 when the loop is dead).
        Never blocks on the loop or on output: it is called from gRPC's polling thread."""
        failed: list[Pending] = []
        with self._lock:
            if self.loop_error:
                return 0
            self._estop_generation += 1
            first = self.state != LoopState.ESTOP
            if first:
                self.state, self.estop_reason, self._latch_owner = LoopState.ESTOP, reason, owner
                self.hold_reason = ""
                self.counters["estops"] += 1
                self._latch_serial += 1
                if self._pending is not None:
                    failed.append(self._pending)
                    self._pending = None
                if self._reset_job is not None:
                    self._reset_job.cancelled = True
                    failed.append(self._reset_job.item)
                    self._reset_job = None
        for item in failed:
            item.fail(grpc.StatusCode.FAILED_PRECONDITION, f"e-stop latched ({reason}) before this command's tick; "
                                                           "not executed", "estop")
        with self._ack:
            if self._stop_requested == self._stop_done:
                self._stop_requested_at = time.monotonic()
            self._stop_requested += 1
            generation = self._stop_requested
        self._wake.set()
        if first:
            self.log.warning("e-stop latched: %s", reason)
        return generation

    def estop(self, reason: str, owner: int | None = None, generation: int = 0) -> int:
        """An ``EStop`` call's body: its reason (escaped, cut) replaces the provisional ``HEADER_REASON`` of the
        latch its headers made (request ``generation``); that request is this call's stop, so none is added.
        Without a header request (``generation`` 0) it requests one. Returns the number for ``wait_stopped``."""
        reason = safe_text(reason, self.config.max_reason_chars) or "requested"
        with self._lock:
            named = self.state == LoopState.ESTOP and owner is not None and self._latch_owner == owner
            if named and self.estop_reason == HEADER_REASON:
                self.estop_reason = reason
        if named:
            self.log.warning("e-stop reason: %s", reason)
        if generation > 0:
            return generation
        return self.request_estop(reason, owner)

    def wait_stopped(self, generation: int, timeout_s: float) -> tuple[bool, str | None]:
        """Wait until the driver's ``stop()`` for request ``generation`` returned: (acknowledged, error or None)."""
        with self._ack:
            ok = self._ack.wait_for(lambda: self._stop_done >= generation or self._dead, timeout_s)
            if self._dead and self._stop_done < generation:
                return False, "the control loop died"
            return bool(ok), self._stop_error if ok else None

    def clear_estop(self, admitted: int | None = None) -> None:
        """Clear the latch, unless an e-stop was requested after generation ``admitted`` (the ``ClearEStop``'s
        admission; None: now): then ``CallError(FAILED_PRECONDITION)`` and the latch stands."""
        self.check_alive()
        cleared = False
        with self._lock:
            newer = admitted is not None and self._estop_generation > admitted
            if self.state == LoopState.ESTOP and newer:
                reason = self.estop_reason
            elif self.state == LoopState.ESTOP:
                self.state, self.estop_reason, self._latch_owner = LoopState.RUNNING, "", None
                self._last_contact = time.monotonic()
                self._rebase_pending = True  # the supervisor starts afresh (a hand outside may come back in)
                cleared = True
        if cleared:
            self.log.warning("e-stop cleared")
            return
        if self.state == LoopState.ESTOP and newer:
            self.refusals.add("clear_superseded")
            raise CallError(grpc.StatusCode.FAILED_PRECONDITION,
                            f"not cleared: an e-stop was requested after this ClearEStop was sent ({reason}); check "
                            "the robot, then send ClearEStop again")

    def snapshot(self) -> dict[str, Any]:
        """Counters and state copied under a short lock (never waits on the loop's work)."""
        with self._lock:
            state = self.state.value
            if self.state in (LoopState.RUNNING, LoopState.HOLDING) and self._reset_job is not None:
                state = "resetting"
            return {"counters": dict(self.counters), "state": state, "estop_reason": self.estop_reason,
                    "hold_reason": self.hold_reason, "loop_error": self.loop_error, "breaches": dict(self.breaches),
                    "last_tick": self._last_tick, "episode": self.episode}

    # -- the loop ----------------------------------------------------------------------------------------------
    def _prioritise(self) -> str:
        """Ask the OS to run the control thread before ordinary work, best effort: real-time ``SCHED_FIFO`` at
        ``control_priority`` if this process may (root or CAP_SYS_NICE), else nice -10, else nothing. Why: on a
        loaded machine the scheduler, not the server, decides when a tick starts; gRPC's own threads, an attacker's
        junk and other programs all compete with the loop for the CPU. Returns what was granted."""
        p = self.config.control_priority
        if p <= 0 or not hasattr(os, "sched_setscheduler"):
            return "normal"
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p))  # 0: this thread (Linux)
            return f"SCHED_FIFO {p}"
        except (OSError, ValueError):
            pass
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), -10)
            return "nice -10"
        except (OSError, ValueError):
            return "normal (no permission for a higher one)"

    def _run(self) -> None:
        self.loop_priority = self._prioritise()
        self.log.info("control loop priority: %s", self.loop_priority)
        try:
            period = self.period
            next_tick = time.monotonic()
            while not self._stop.is_set():
                self._wake.clear()
                self._service_stop()  # an e-stop is served between ticks, at once
                now = time.monotonic()
                if now < next_tick:
                    self._wake.wait(next_tick - now)
                    continue
                self._tick(now, now - next_tick)
                end = time.monotonic()
                self.work.append(end - now)
                next_tick += period
                if end > next_tick:  # overran: count it and start again from now instead of bursting to catch up
                    with self._lock:
                        self.counters["overruns"] += 1
                    next_tick = end
            self._service_stop()  # a stop requested while closing (the server's shutdown) is still served
        except BaseException as e:  # a bug, not a driver fault: stop the driver, answer UNAVAILABLE from now on
            self._die(e)

    def _die(self, e: BaseException) -> None:
        reason = safe_text(f"{type(e).__name__}: {e}", 300)
        with self._lock:
            self.loop_error, self.state = reason, LoopState.DEAD
            items = [self._pending, self._current, self._reset_job.item if self._reset_job else None]
            self._pending = self._current = self._reset_job = None
        stop_error = None
        try:
            self.robot.stop()  # first: the log line can wait, the robot cannot
        except Exception as err:
            stop_error = err
        with self._lock:
            self.counters["stops"] += 1
            if stop_error is not None:
                self.loop_error = f"{reason}; driver stop() failed too: {safe_text(str(stop_error), 200)}"
        for item in items:
            if item is not None:
                item.fail(grpc.StatusCode.UNAVAILABLE, f"the robot's control loop died ({reason})", "loop_dead")
        with self._ack:
            self._dead = True
            self._ack.notify_all()
        self.log.error("control loop died (%s); driver stopped", reason, exc_info=e)
        if stop_error is not None:
            self.log.error("driver stop() failed after the control loop died: %s", safe_text(str(stop_error), 200))

    def _service_stop(self) -> None:
        """Call ``driver.stop()`` if an e-stop was requested since the last call, and acknowledge it. While the
        same latch holds, a stop that succeeded less than ``restop_interval_s`` ago acknowledges new requests
        without another call (the robot has only been held since)."""
        with self._ack:
            generation = self._stop_requested
            if generation <= self._stop_done:
                return
            requested_at = self._stop_requested_at
        with self._lock:
            serial, latched = self._latch_serial, self.state == LoopState.ESTOP
        now = time.monotonic()
        recent = latched and serial == self._last_stop_serial and \
            now - self._last_stop_at < self.config.restop_interval_s
        error = None
        if not recent:
            try:
                self.robot.stop()
            except Exception as e:
                error = safe_text(f"{type(e).__name__}: {e}", 200)
            else:
                self._last_stop_at, self._last_stop_serial = time.monotonic(), serial
            with self._lock:
                self.counters["stops"] += 1
        with self._ack:
            self._stop_done, self._stop_error = generation, error
            self.estop_ack_s = time.monotonic() - requested_at
            self._ack.notify_all()
        if error is not None:
            self.log.error("driver stop() failed: %s", error)

    def _latch_and_stop(self, reason: str) -> None:
        """From the control thread: latch and stop the driver now (driver fault, hard breach)."""
        self.request_estop(safe_text(reason, self.config.max_reason_chars))
        self._service_stop()

    def _driver(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as e:
            raise _DriverFault(f"{getattr(fn, '__name__', 'driver')}: {type(e).__name__}: {e}") from e

    def _ee(self, obs: RobotObservation | None) -> np.ndarray | None:
        c = self.spec.cartesian
        if c is None or obs is None:
            return None
        return np.asarray(obs.state, np.float64)[slice(*c.ee_slice)]

    def _command(self, action: np.ndarray) -> tuple[np.ndarray, int, np.ndarray | None]:
        """Clamp ``action`` at the measured state, let the governor scale its displacement, send it. Returns (the
        action applied, clamp flags, the commanded hand target or None)."""
        safe = self.safety.clamp(action, self._obs.state if self._obs is not None else None)
        applied, target, flags = safe.action, None, safe.flags
        c = self.spec.cartesian
        ee = self._ee(self._obs)
        if c is not None and ee is not None:
            delta = applied[:3] * c.metres_per_unit
            if self.governor is not None and self._obs is not None:
                governed, scaled = self.governor.limit(delta, self._obs)
                if scaled:
                    flags |= CLAMP_GOVERNOR
                    applied = applied.copy()
                    applied[:3] = governed / c.metres_per_unit
                    delta = governed
                    with self._lock:
                        self.counters["governed"] += 1
            target = ee + delta
        self._driver(self.robot.command, applied)
        return applied, flags, target

    def _tick(self, now: float, lateness: float) -> None:
        with self._lock:
            if self._pending is not None and self._pending.expires <= time.monotonic():
                # Its caller stopped waiting and its worker has not woken to withdraw it (a loaded machine): never
                # executed late. The tick holds instead, as it does with no command.
                self._withdraw_pending()
            item, self._pending = self._pending, None
            self._current = item
            state, job = self.state, self._reset_job
            rebase, self._rebase_pending = self._rebase_pending, False
            self.counters["ticks"] += 1
            self._last_tick = now
            if job is not None:
                self._last_contact = now  # a client waiting for its reset is in contact
        self.jitter.append(max(0.0, lateness))
        before = self._obs
        if rebase:
            self.supervisor.rebase(self._obs)
            if self.governor is not None:
                self.governor.rebase(self._obs)
        applied: np.ndarray | None = None
        flags = 0
        target: np.ndarray | None = None
        obs: RobotObservation | None = None
        finished: Pending | None = None  # a reset job's request, answered this tick
        check = state != LoopState.ESTOP
        fault: str | None = None
        try:
            if state == LoopState.ESTOP:
                self._driver(self.robot.hold)
                if item is not None and item.kind != "hold":
                    item.fail(grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
            elif job is not None:
                if item is not None:
                    item.fail(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy: a reset is in progress", "busy")
                if state == LoopState.SUPERVISOR_HOLD:
                    self._driver(self.robot.hold)
                else:
                    obs, target, finished = self._reset_tick(job)
            elif state == LoopState.SUPERVISOR_HOLD and item is not None and item.kind != "hold":
                self._driver(self.robot.hold)
                item.fail(grpc.StatusCode.UNAVAILABLE, self._hold_message(), "holding")
            elif item is not None and item.kind == "reset":
                position = self._driver(self.robot.reset_position, item.seed) if self.spec.cartesian else None
                if position is None:  # the driver moves the robot itself (or needs its operator)
                    obs = self._driver(self.robot.reset, item.seed)
                    self._reset_done()
                    finished, item, check = item, None, False
                else:
                    job = _ResetJob(item, np.asarray(position, np.float64))
                    with self._lock:
                        if self.state == LoopState.ESTOP:  # latched since this tick began
                            item.fail(grpc.StatusCode.FAILED_PRECONDITION, self._estop_message(), "estop")
                            job = None
                        else:
                            self._reset_job = job
                    item = None
                    if job is not None:
                        obs, target, finished = self._reset_tick(job)
            elif item is not None and item.kind == "step":
                assert item.action is not None
                try:
                    applied, flags, target = self._command(item.action)
                except UnsafeCommand as e:  # never reaches the driver; the robot holds this tick
                    item.fail(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.reason)
                    self._driver(self.robot.hold)
                else:
                    self._last_applied = applied.copy()
            else:
                self._driver(self.robot.hold)
            if obs is None:
                obs = self._driver(self.robot.observe)
            self._obs = obs
            if self.governor is not None:
                self.governor.observe(obs, None if applied is None or target is None or before is None
                                      else target - self._ee(before))
            if finished is not None and finished.kind == "reset":
                check = check and self._reset_jump_ok(before, obs)
                self.supervisor.rebase(obs)
                if self.governor is not None:
                    self.governor.rebase(obs)
            if check:
                self._react(self.supervisor.check(obs, target, over=True), now)
        except _DriverFault as e:
            self._latch_and_stop(f"driver error: {e}")  # the stop first, then the log line
            fault = safe_text(str(e), 500)
            for it in (item, finished):
                if it is not None:
                    it.fail(grpc.StatusCode.INTERNAL, f"driver error: {fault}", "driver_error")

        watchdog_idle = None
        with self._lock:
            self._current = None
            if applied is not None:
                self.counters["commands"] += 1
                if self.state == LoopState.HOLDING:
                    self.state = LoopState.RUNNING
            else:
                self.counters["holds"] += 1
            idle = now - self._last_contact
            if self.state == LoopState.RUNNING and idle > self.config.watchdog_s:
                self.state = LoopState.HOLDING
                self.counters["watchdog_trips"] += 1
                watchdog_idle = idle
            episode, tick = self.episode, self.counters["ticks"]
        if fault is not None:
            self.log.error("driver error; driver stopped and e-stop latched: %s", fault)
        if watchdog_idle is not None:
            self.log.warning("watchdog: no command or heartbeat for %.3f s; holding", watchdog_idle)
        for it in (item, finished):
            if it is None or it.done.is_set():
                continue
            self.queue.append(now - it.arrived)
            o = self._obs
            assert o is not None
            it.reply = pb.StepReply(
                observation=pb.Observation(
                    state=np.asarray(o.state, np.float32).tolist(), reward=o.reward, success=o.success, stamp=o.stamp,
                    privileged_state=[] if o.privileged_state is None
                    else np.asarray(o.privileged_state, np.float32).tolist()),
                seq=it.seq, tick=tick, episode=episode,
                applied_action=[] if applied is None or it is not item else applied.tolist(),
                clamp_flags=flags if it is item else 0, queue_s=now - it.arrived,
            )
            it.images = dict(o.images)  # encoded by the waiting worker, not here
            it.done.set()

    def _reset_done(self) -> None:
        with self._lock:
            self.counters["resets"] += 1
            self.episode += 1
        self._last_applied = self._rest_action.copy()

    def _reset_tick(self, job: _ResetJob) -> tuple[RobotObservation | None, np.ndarray | None, Pending | None]:
        """One tick of a reset motion: a step of at most ``reset_speed_fraction`` step limits towards the start
        position, through the safety filter; at the start position, the driver's reset. Returns (observation if
        the driver reset, commanded target, the finished request)."""
        c = self.spec.cartesian
        assert c is not None and self._obs is not None
        ee = self._ee(self._obs)
        assert ee is not None
        delta = job.target - ee
        dist = float(np.linalg.norm(delta))
        done = dist <= self.config.reset_tolerance_m
        with self._lock:
            live = not job.cancelled and self._reset_job is job
            if live and done:
                self._reset_job = None
        if not live:  # withdrawn (deadline) or e-stopped since this tick began: hold
            self._driver(self.robot.hold)
            return None, None, None
        if done:
            obs = self._driver(self.robot.reset, job.item.seed)
            self._reset_done()
            return obs, None, job.item
        step = delta * min(1.0, self.config.reset_speed_fraction * self.supervisor.step_limit_m / dist)
        action = self._last_applied.copy()
        action[:3] = step / c.metres_per_unit
        _, _, target = self._command(np.clip(action, self.safety.low, self.safety.high))
        return None, target, None

    def _reset_jump_ok(self, before: RobotObservation | None, after: RobotObservation) -> bool:
        """After a server-driven reset the driver's own reset may move the hand by little more than the tolerance
        (its preview was wrong otherwise): a larger jump is a hard breach."""
        a, b = self._ee(before), self._ee(after)
        if a is None or b is None:
            return True
        jump = float(np.linalg.norm(b - a))
        if jump <= self.config.reset_tolerance_m + 0.005:
            return True
        with self._lock:
            self.breaches["reset_jump_hard"] = self.breaches.get("reset_jump_hard", 0) + 1
        self._latch_and_stop(f"supervisor: the driver's reset moved the hand {jump * 1e3:.1f} mm in one tick")
        return False

    def _react(self, breaches: list[Breach], now: float) -> None:
        """Hold on a soft breach, stop and latch on a hard one; count every breached tick (any level)."""
        c = self.config.supervisor
        message = None
        if breaches:
            with self._lock:
                for b in breaches:
                    self.breaches[b.key] = self.breaches.get(b.key, 0) + 1
            hard = next((b for b in breaches if b.level == "hard"), None)
            if hard is not None:
                self._latch_and_stop(f"supervisor: {hard.message}")
                self.log.warning("supervisor: hard breach (%s); driver stopped", hard.message)
                return
            soft = [b for b in breaches if b.level == "soft"]
            if soft:
                with self._lock:
                    if self.state in (LoopState.RUNNING, LoopState.HOLDING):
                        self.state, self._hold_since = LoopState.SUPERVISOR_HOLD, now
                        message = soft[0].message
                    if self.state == LoopState.SUPERVISOR_HOLD:
                        self.hold_reason, self._clean_ticks = soft[0].message, 0
        if not any(b.level == "soft" for b in breaches):
            with self._lock:
                if self.state == LoopState.SUPERVISOR_HOLD:
                    self._clean_ticks += 1
                    if self._clean_ticks >= c.settle_ticks:
                        self.state, self.hold_reason = LoopState.RUNNING, ""
                        self._last_contact = now
        with self._lock:
            overdue = self.state == LoopState.SUPERVISOR_HOLD and now - self._hold_since > c.max_hold_s
            reason = self.hold_reason
        if overdue:
            self._latch_and_stop(f"supervisor: a hold did not clear within {c.max_hold_s:g} s ({reason})")
        if message is not None:
            self.log.warning("supervisor: soft breach (%s); holding", message)
