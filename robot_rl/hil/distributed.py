"""The actor-learner link over Ray: the actor beside the robot, the learner on a GPU box, each its own process.

Two rules shape everything here (from the hardware-bridge issue):

* **A dead learner never blocks the control loop.** ``RayLink.push`` and ``RayLink.poll_weights`` only submit
  calls (``.remote()``) and look at finished ones through ``ObjectRef.future()``; a call that is not back within
  ``call_timeout_s`` counts as a failure, and the name lookup that finds a restarted learner runs as a Ray task in
  another process: ``ray.get_actor`` waits on the cluster's control store while holding the GIL, so even a
  background thread calling it would freeze the loop (for 100+ ms per missed lookup on a busy machine).
* **A dead actor never hangs the learner.** The learner only answers calls (it never calls an actor), ``add`` only
  queues the chunk, and a background thread does the training, so nothing it does waits on any actor.

The learner (``LearnerActor``) checkpoints itself to ``<run_dir>/checkpoints/learner.pt`` every
``checkpoint_every_s`` and restores from that file when it starts, so a learner started again under the same name
and run directory resumes where the last checkpoint left it; ``RayLink`` finds it by name and carries on.

Ray is imported only when a learner is started or a link is built, so importing this module does not need Ray.
"""

from __future__ import annotations

import copy
import os
import threading
import time
import traceback
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from robot_rl import checkpoint
from robot_rl.hil.learner import HILLearner, LearnerConfig, check_transitions

if TYPE_CHECKING:
    from ray.actor import ActorHandle

__all__ = [
    "CHECKPOINT_FILE",
    "LearnerActor",
    "RayLink",
    "connect_learner",
    "learner_actor_class",
    "start_learner",
]

CHECKPOINT_FILE = Path("checkpoints") / "learner.pt"  # relative to the learner's run directory
CHECKPOINT_FORMAT = 1


class LearnerActor:
    """A ``HILLearner`` served to actors: the body of the Ray actor that ``start_learner`` creates.

    Calls from actors (``add``, ``get_weights``, ``stats``, ``ping``) run on Ray's method thread and only touch a
    queue or an already-published snapshot, so they answer within microseconds however long an update takes. A
    background thread moves queued chunks into the learner, makes the updates they earned (``LearnerConfig.utd``
    per transition) in slices of at most ``train_slice`` updates, publishes the new actor weights after each
    slice, and checkpoints every ``checkpoint_every_s``. A plain class, so it also runs (and is tested) without
    Ray; ``learner_actor_class()`` is its Ray actor class.
    """

    def __init__(
        self,
        config: LearnerConfig,
        run_dir: str | Path,
        checkpoint_every_s: float = 120.0,
        train_slice: int = 8,
        threads: int = 0,
    ) -> None:
        if checkpoint_every_s <= 0 or train_slice < 1:
            raise ValueError("checkpoint_every_s must be > 0 and train_slice >= 1")
        if threads:
            torch.set_num_threads(threads)
        self.run_dir = Path(run_dir)
        self.checkpoint_path = self.run_dir / CHECKPOINT_FILE
        self.checkpoint_every_s = float(checkpoint_every_s)
        self.train_slice = int(train_slice)
        restore = self.checkpoint_path.is_file()
        # Demos are already in a checkpoint's prior buffer; loading them again would only be overwritten.
        self.learner = HILLearner(config, load_demos=not restore)
        self.restored = False
        if restore:
            state = checkpoint.load(self.checkpoint_path)
            try:
                self.learner.load_state_dict(state["learner"])
            except (KeyError, RuntimeError, ValueError) as e:
                raise checkpoint.CheckpointError(
                    f"{self.checkpoint_path} does not fit this learner configuration ({e}); start with the run's "
                    "own configuration or use a new run_dir"
                ) from e
            self.restored = True

        self._lock = threading.Lock()  # guards self.learner between the training thread and save()
        self._save_lock = threading.Lock()  # one checkpoint write at a time, so an older one never wins
        self._inbox: deque[dict[str, np.ndarray]] = deque()
        self._wake = threading.Event()
        self._stop = threading.Event()
        # The frozen backbone's tensors (a pretrained encoder's) once: only an actor without weights gets them.
        frozen = self.learner.frozen_prefixes
        self._frozen = {k: v.numpy() for k, v in self.learner.actor_state().items() if frozen and k.startswith(frozen)}
        self._published: tuple[int, dict[str, np.ndarray]] = self._snapshot()
        self._started = time.monotonic()
        self.adds = 0
        self.weights_served = 0
        self.checkpoints = 0
        self.last_checkpoint: float | None = None  # monotonic time of the last write
        self.last_metrics: dict[str, float] = {}
        self.train_error: str | None = None
        self.checkpoint_error: str | None = None  # of the last periodic checkpoint, None once one succeeds
        self._thread = threading.Thread(target=self._train_loop, name="hil-learner-train", daemon=True)
        self._thread.start()

    # -- calls from actors ----------------------------------------------------------------------------------
    def add(self, transitions: dict[str, np.ndarray]) -> None:
        """Validate and queue a chunk; it is stored and trained on by the background thread."""
        check_transitions(transitions, self.learner.cfg.obs_dim, self.learner.cfg.action_dim, self.learner.cameras)
        if self.train_error is not None:
            # Tell the actor (its link counts a rejection) rather than pile up data nobody trains on.
            raise RuntimeError(f"the learner's training thread has stopped: {self.train_error.splitlines()[0]}")
        self._inbox.append(transitions)
        self.adds += 1
        self._wake.set()

    def get_weights(self, have_version: int) -> tuple[int, dict[str, np.ndarray]] | None:
        """The latest published actor weights as (version, state) if newer than `have_version`, else None.

        The state travels as numpy arrays: Ray ships those as raw buffers, whereas a torch tensor is pickled
        through ``torch.save`` per tensor, which costs the receiving control loop milliseconds to unpickle.
        """
        version, state = self._published
        if version <= have_version:
            return None
        self.weights_served += 1
        if have_version < 0:  # an actor that has no weights yet (new, or relinked to this learner): the frozen part too
            state = {**self._frozen, **state}
        return version, state

    def stats(self) -> dict[str, Any]:
        """Counters and health, read without waiting for the training thread."""
        now = time.monotonic()
        return {
            **self.learner.counters(),
            "published_version": self._published[0],
            "adds": self.adds,
            "queued_chunks": len(self._inbox),
            "weights_served": self.weights_served,
            "checkpoints": self.checkpoints,
            "last_checkpoint_age_s": None if self.last_checkpoint is None else now - self.last_checkpoint,
            "restored": self.restored,
            "pid": os.getpid(),
            "uptime_s": now - self._started,
            "training": self._thread.is_alive(),
            "train_error": self.train_error,
            "checkpoint_error": self.checkpoint_error,
            **{f"metrics/{k}": v for k, v in self.last_metrics.items()},
        }

    def ping(self) -> bool:
        return True

    # -- operator calls ---------------------------------------------------------------------------------------
    def save(self) -> str:
        """Write a checkpoint now (atomically: temp file, fsync, rename) and return its path.

        The state is snapshotted under the lock (a consistent cut between two updates) and written outside it, so
        training goes on while a large replay buffer is written. Called through Ray it occupies the actor's method
        thread meanwhile, so actors' calls wait; the periodic checkpoints run on the training thread and do not.
        """
        with self._save_lock:
            with self._lock:
                state = self.learner.state_dict()
                # Buffer state is already copied; the agent's tensors are live ones that the next update changes.
                state["agent"] = copy.deepcopy(state["agent"])
            checkpoint.atomic_save({"format": CHECKPOINT_FORMAT, "learner": state}, self.checkpoint_path)
            self.checkpoints += 1
            self.last_checkpoint = time.monotonic()
        return str(self.checkpoint_path)

    def stop(self, save: bool = True) -> dict[str, Any]:
        """Stop the training thread (after its current slice) and, by default, write a last checkpoint."""
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout=60.0)
        if save:
            self.save()
        return self.stats()

    def _snapshot(self) -> tuple[int, dict[str, np.ndarray]]:
        # actor_state() already copies, so the arrays never change after publication (actor weights are fp32).
        return self.learner.version, {k: v.numpy() for k, v in self.learner.actor_state(frozen=False).items()}

    # -- the training thread ------------------------------------------------------------------------------------
    def _train_loop(self) -> None:
        next_checkpoint = time.monotonic() + self.checkpoint_every_s
        try:
            while not self._stop.is_set():
                # Clear before draining: a chunk queued after the drain sets the event again and cuts the wait.
                self._wake.clear()
                trained = False
                with self._lock:
                    while self._inbox:
                        # Pop only once stored: stats() counts a chunk as queued until its transitions are counted.
                        self.learner.add(self._inbox[0])
                        self._inbox.popleft()
                    if self.learner.pending_updates > 0:
                        metrics = self.learner.train_due(self.train_slice)
                        if metrics:
                            self.last_metrics = metrics
                            trained = True
                            self._published = self._snapshot()
                if time.monotonic() >= next_checkpoint:
                    try:
                        self.save()
                        self.checkpoint_error = None
                    except Exception as e:  # a full disk must not stop training: report it, retry next time
                        self.checkpoint_error = f"{type(e).__name__}: {e}"
                    next_checkpoint = time.monotonic() + self.checkpoint_every_s
                if not trained:
                    self._wake.wait(timeout=0.05)
        except BaseException:
            self.train_error = traceback.format_exc()


_REMOTE_CLASS: Any = None


def learner_actor_class() -> Any:
    """``ray.remote(LearnerActor)``, made on first use so that importing this module does not import Ray."""
    global _REMOTE_CLASS
    if _REMOTE_CLASS is None:
        import ray

        _REMOTE_CLASS = ray.remote(LearnerActor)
    return _REMOTE_CLASS


def start_learner(
    name: str,
    config: LearnerConfig,
    run_dir: str | Path,
    namespace: str | None = None,
    *,
    detached: bool = False,
    checkpoint_every_s: float = 120.0,
    train_slice: int = 8,
    threads: int = 0,
    num_cpus: float = 1,
    num_gpus: float | None = None,
    max_restarts: int = 0,
    replace_dead: bool = True,
) -> ActorHandle:
    """Create the named learner actor (Ray must be initialised) and return its handle without waiting for it.

    If ``run_dir`` holds a learner checkpoint the actor resumes from it. Not detached by default: the learner then
    lives as long as the process that started it, so stopping that process (Ctrl-C) frees the GPU and leaves no
    orphan behind; pass ``detached=True`` to let it outlive its starter (then stop it with ``ray.kill``).
    ``max_restarts > 0`` lets Ray restart a crashed learner itself (it restores from the checkpoint on restart).
    ``num_gpus`` defaults to 1 for a CUDA device, else 0.

    Ray keeps the name of a crashed actor taken for as long as the process that created it lives, so with
    ``replace_dead`` a name held by a dead learner is released (``ray.kill``) and taken over. Blocking (it pings
    the holder). Raises ValueError if a learner that answers, or one that hangs, holds the name.
    """
    import ray

    config.validate()
    if num_gpus is None:
        num_gpus = 1 if config.device.startswith("cuda") else 0
    options: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "num_cpus": num_cpus,
        "num_gpus": num_gpus,
        "max_restarts": max_restarts,
    }
    if detached:
        options["lifetime"] = "detached"
    cls = learner_actor_class().options(**options)
    args = (config, str(run_dir), checkpoint_every_s, train_slice, threads)
    try:
        return cls.remote(*args)
    except ValueError:  # ActorAlreadyExistsError
        if not replace_dead:
            raise
    try:
        holder = ray.get_actor(name, namespace=namespace)
        ray.get(holder.ping.remote(), timeout=10.0)
    except ray.exceptions.RayActorError:
        ray.kill(holder)  # dead: releases the name
    except ray.exceptions.GetTimeoutError as e:
        raise ValueError(f"learner {name!r} exists but does not answer; ray.kill it if it hangs") from e
    except ValueError:
        pass  # released in the meantime
    else:
        raise ValueError(f"a live learner named {name!r} already runs in namespace {namespace!r}")
    deadline = time.monotonic() + 10.0
    while True:
        try:
            return cls.remote(*args)
        except ValueError:  # the kill has not reached the name registry yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def connect_learner(name: str, namespace: str | None = None, timeout_s: float = 30.0) -> ActorHandle:
    """Find the learner named `name` and wait until it answers a ping; TimeoutError after `timeout_s`.

    Blocking: for setting up an actor before its control loop starts (``RayLink`` reconnects on its own later).
    """
    import ray

    deadline = time.monotonic() + timeout_s
    last_error = "not found"
    while True:
        try:
            handle = ray.get_actor(name, namespace=namespace)
            ray.get(handle.ping.remote(), timeout=max(0.01, deadline - time.monotonic()))
            return handle
        except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as e:
            last_error = f"{type(e).__name__}: {e}"
        if time.monotonic() >= deadline:
            raise TimeoutError(f"no live learner {name!r} in namespace {namespace!r} after {timeout_s}s ({last_error})")
        time.sleep(0.1)


_FIND_TASK: Any = None
LOOKUP_DEADLINE_S = 15.0  # a lookup task not back by then is abandoned (it may wait for a worker to start)


def _find_learner_task() -> Any:
    """The Ray task that looks the learner up by name and pings it, in another worker process.

    Why a task and not a thread: ``ray.get_actor`` (like every synchronous call to Ray's control store) holds the
    GIL while it waits, for 100+ ms on a busy machine when the name is missing, so a lookup thread would freeze the
    control loop anyway. Submitting a task and collecting its result through its future never waits. The
    function is nested so that it is pickled by value: the worker needs only Ray, not this package and torch.
    """
    global _FIND_TASK
    if _FIND_TASK is None:
        import ray

        def find_learner(name: str, namespace: str | None, ping_timeout_s: float) -> Any:
            import ray

            handle = ray.get_actor(name, namespace=namespace)
            ray.get(handle.ping.remote(), timeout=ping_timeout_s)
            return handle

        _FIND_TASK = ray.remote(num_cpus=0, max_retries=0)(find_learner)
    return _FIND_TASK


def _concatenate(chunks: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


def _layout(chunk: dict[str, np.ndarray]) -> tuple:
    """What chunks must share to be concatenated: their keys (camera frames included), trailing shapes, dtypes."""
    return tuple(sorted((k, v.shape[1:], v.dtype.str) for k, v in chunk.items()))


class RayLink:
    """The actor-side link to a ``LearnerActor``: the same interface as ``robot_rl.hil.learner.LocalLink``, never blocking.

    ``push`` sends a chunk with ``add.remote`` while fewer than ``max_in_flight`` sends are unacknowledged and
    otherwise keeps it in a local queue of at most ``max_buffered`` chunks (dropping, and counting, the oldest);
    queued chunks go out up to ``max_merge`` per call once there is room.
    ``poll_weights`` asks for newer weights at most every ``sync_every_s`` and returns them on a later call, once
    they have arrived; with each such request it also asks for the learner's counters (updates made, updates owed,
    transitions), which ``stats`` then includes, so the run's metrics show a learner that falls behind, and for its
    last losses and Q (``take_metrics``). Any call not back within ``call_timeout_s``, or failing because the
    learner died, marks the link dead (``alive`` False); then chunks queue up (bounded) and every
    ``reconnect_every_s`` a Ray task looks the learner up by name and pings it, so a learner restarted under the same
    name is picked up. Chunks that were in flight when the learner died are counted as lost (they may or may not
    have arrived).

    A queued chunk is copied, a sent one is serialised at once, so the caller may reuse its arrays after ``push``.
    Build the link before the control loop starts: the constructor may take a second (it registers the lookup task
    with the cluster). Without ``handle`` the link starts dead and connects through its first lookup.
    """

    def __init__(
        self,
        name: str,
        namespace: str | None = None,
        *,
        handle: ActorHandle | None = None,
        max_in_flight: int = 4,
        max_buffered: int = 1000,
        max_merge: int = 64,
        sync_every_s: float = 1.0,
        call_timeout_s: float = 5.0,
        reconnect_every_s: float = 1.0,
    ) -> None:
        import ray

        if min(max_in_flight, max_buffered, max_merge) < 1:
            raise ValueError("max_in_flight, max_buffered and max_merge must be >= 1")
        self._ray = ray
        self.name, self.namespace = name, namespace
        self.max_in_flight, self.max_buffered, self.max_merge = int(max_in_flight), int(max_buffered), int(max_merge)
        self.sync_every_s, self.call_timeout_s = float(sync_every_s), float(call_timeout_s)
        self.reconnect_every_s = float(reconnect_every_s)

        self._handle = handle
        self._alive = handle is not None
        self._failed_before = False
        # Calls under way as (future, time sent, ...). Ray completes a call's future from its own thread; checking
        # `done()` is a plain attribute read, whereas even ray.wait(timeout=0) may ask the local raylet over IPC
        # and take 100+ ms when that process is short of CPU.
        self._in_flight: deque[tuple[Future, float, int, int]] = deque()  # (..., transitions, chunks)
        self._queue: deque[tuple[dict[str, np.ndarray], int]] = deque()
        self._weights_call: tuple[Future, float] | None = None
        self._stats_call: Future | None = None
        #: the learner's progress counters (``HILLearner.counters``) as of its last answer; {} before one
        self.learner_counters: dict[str, int] = {}
        self._learner_metrics: dict[str, float] = {}  # its last training slice's losses and Q, until taken
        self._last_sync = -float("inf")
        self._new_weights: dict[str, torch.Tensor] | None = None
        self._find = _find_learner_task()
        self._lookup: tuple[Future, float] | None = None  # (a find_learner task, time submitted)
        self._last_lookup = -float("inf")
        self.weights_version = -1  # version of the last weights received from the current learner

        self.pushed = 0  # chunks given to push
        self.sent = 0  # chunks the learner acknowledged
        self.sent_transitions = 0
        self.dropped = 0  # chunks dropped from a full local queue
        self.dropped_transitions = 0
        self.lost_transitions = 0  # in flight when the learner was declared dead
        self.rejected = 0  # chunks the learner refused (an error raised by its add)
        self.failures = 0  # learner deaths and timeouts
        self.timeouts = 0  # the failures that were calls overdue by call_timeout_s (a hung or unreachable learner)
        self.reconnects = 0
        self.weight_syncs = 0  # new weights received
        self.last_error: str | None = None  # of the last failed or rejected call
        self.last_lookup_error: str | None = None

        # The first submission of the lookup task exports it to the cluster, a synchronous call that can take a
        # second: pay it here, before the control loop runs. Without a handle this is also the first lookup.
        self._start_lookup(time.monotonic())
        if handle is not None:
            self._lookup = None

    @property
    def alive(self) -> bool:
        """Whether the learner answered the last calls (False from a failure until a reconnect succeeds)."""
        return self._alive

    # -- the LocalLink interface --------------------------------------------------------------------------------
    def push(self, transitions: dict[str, np.ndarray]) -> None:
        """Hand a chunk to the learner without waiting: send it now or queue it (bounded)."""
        n = check_transitions(transitions)  # structure only: the learner checks the dimensions
        now = time.monotonic()
        self.pushed += 1
        self._service(now)
        if len(self._queue) >= self.max_buffered:
            _, old_n = self._queue.popleft()
            self.dropped += 1
            self.dropped_transitions += old_n
        self._queue.append((transitions, n))
        self._send(now)
        if self._queue and self._queue[-1][0] is transitions:  # it waits: keep our own copy
            self._queue[-1] = ({k: v.copy() for k, v in transitions.items()}, n)

    def poll_weights(self) -> dict[str, torch.Tensor] | None:
        """New actor weights if some arrived since the last call, else None; asks for them every sync_every_s."""
        now = time.monotonic()
        self._service(now)
        if (
            self._alive
            and self._handle is not None
            and self._weights_call is None
            and now - self._last_sync >= self.sync_every_s
        ):
            self._last_sync = now
            try:
                self._weights_call = (self._handle.get_weights.remote(self.weights_version).future(), now)
                if self._stats_call is None:
                    self._stats_call = self._handle.stats.remote().future()
            except Exception as e:
                self._fail(now, f"get_weights: {type(e).__name__}: {e}")
        weights, self._new_weights = self._new_weights, None
        return weights

    def take_metrics(self) -> dict[str, float]:
        """The losses and Q of the learner's last training slice as of its last answer (``LocalLink.take_metrics``
        gives the mean over the episode's updates instead), once: {} until a newer answer comes."""
        metrics, self._learner_metrics = self._learner_metrics, {}
        return metrics

    def stats(self) -> dict[str, Any]:
        return {
            "alive": self._alive,
            "pushed": self.pushed,
            "sent": self.sent,
            "sent_transitions": self.sent_transitions,
            "dropped": self.dropped,
            "dropped_transitions": self.dropped_transitions,
            "lost_transitions": self.lost_transitions,
            "rejected": self.rejected,
            "failures": self.failures,
            "timeouts": self.timeouts,
            "reconnects": self.reconnects,
            "weight_syncs": self.weight_syncs,
            "weights_version": self.weights_version,
            **self.learner_counters,
            "in_flight": len(self._in_flight),
            "queued": len(self._queue),
            "last_error": self.last_error,
            "last_lookup_error": self.last_lookup_error,
        }

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Blocking: wait until every queued and in-flight chunk is acknowledged (True) or `timeout_s` passes.

        For the end of a session, not for the control loop.
        """
        deadline = time.monotonic() + timeout_s
        while True:
            now = time.monotonic()
            self._service(now)
            self._send(now)
            if not self._queue and not self._in_flight:
                return True
            if now >= deadline:
                return False
            time.sleep(0.005)

    # -- internals ------------------------------------------------------------------------------------------------
    def _service(self, now: float) -> None:
        """Collect finished calls, enforce deadlines, and drive reconnection; never waits."""
        ray = self._ray
        if self._handle is None:
            self._drive_lookup(now)
            return
        done, pending = [], deque()
        for call in self._in_flight:  # one done() per call: a future may complete between two looks
            (done if call[0].done() else pending).append(call)
        self._in_flight = pending
        for future, _, n, chunks in done:
            error = future.exception()  # the future is done: this does not wait
            if error is None:
                self.sent += chunks
                self.sent_transitions += n
            elif isinstance(error, ray.exceptions.RayTaskError):  # the learner refused the chunk, it is alive
                self.rejected += 1
                self.last_error = f"add rejected: {error}"
            else:  # RayActorError (dead or unreachable learner) or another Ray failure
                self._fail(now, f"add: {type(error).__name__}: {error}")
                return
        if self._weights_call is not None and self._weights_call[0].done():
            future = self._weights_call[0]
            self._weights_call = None
            error = future.exception()
            if error is not None:
                self._fail(now, f"get_weights: {type(error).__name__}: {error}")
                return
            result = future.result()
            if result is not None and result[0] > self.weights_version:
                # Arrays from Ray are read-only views of its object store: copy them into tensors of our own.
                self.weights_version = result[0]
                self._new_weights = {k: torch.tensor(v) for k, v in result[1].items()}
                self.weight_syncs += 1
        if self._stats_call is not None and self._stats_call.done():
            future, self._stats_call = self._stats_call, None
            if future.exception() is None:  # a failing learner is found by the other calls
                counters = ("updates", "pending_updates", "transitions", "interventions", "prior_size")
                stats = future.result()
                self.learner_counters = {k: stats[k] for k in counters}
                self._learner_metrics = {k[len("metrics/"):]: v for k, v in stats.items() if k.startswith("metrics/")}
        oldest = [call[1] for call in self._in_flight]
        if self._weights_call is not None:
            oldest.append(self._weights_call[1])
        if oldest and now - min(oldest) > self.call_timeout_s:
            self.timeouts += 1
            self._fail(now, f"a call to the learner took longer than {self.call_timeout_s}s")

    def _send(self, now: float) -> None:
        while (
            self._alive
            and self._handle is not None
            and self._queue
            and len(self._in_flight) < self.max_in_flight
        ):
            # Queued chunks are consecutive (only the oldest are ever dropped), so after an outage up to max_merge
            # of them go in one call: the backlog drains in a few round trips instead of one per chunk.
            # Only chunks of one layout merge (keys, trailing shapes, dtypes: a chunk with other camera frames,
            # which the learner refuses, must not take its neighbours down with it).
            first = _layout(self._queue[0][0])
            count = 1
            while count < min(len(self._queue), self.max_merge) and _layout(self._queue[count][0]) == first:
                count += 1
            batch = [self._queue[i] for i in range(count)]
            chunk = batch[0][0] if count == 1 else _concatenate([c for c, _ in batch])
            n = sum(k for _, k in batch)
            try:
                future = self._handle.add.remote(chunk).future()
            except Exception as e:
                self._fail(now, f"add: {type(e).__name__}: {e}")
                return
            for _ in range(count):
                self._queue.popleft()
            self._in_flight.append((future, now, n, count))

    def _fail(self, now: float, reason: str) -> None:
        self.failures += 1
        self.last_error = reason
        self._alive = False
        self._handle = None
        self._failed_before = True
        self.lost_transitions += sum(call[2] for call in self._in_flight)
        self._in_flight.clear()
        self._weights_call = None
        self._stats_call = None
        self._lookup = None
        # A restarted learner counts versions from its checkpoint, possibly below ours: take whatever it has.
        self.weights_version = -1
        self._last_lookup = now  # give a dying learner a moment to release its name before looking it up

    def _drive_lookup(self, now: float) -> None:
        if self._lookup is not None:
            future, submitted = self._lookup
            if not future.done():
                if now - submitted > LOOKUP_DEADLINE_S:
                    self._lookup = None
                    self.last_lookup_error = f"lookup not back after {LOOKUP_DEADLINE_S}s"
                return
            self._lookup = None
            error = future.exception()
            if error is not None:  # not found, dead, or too slow to answer: try again later
                self.last_lookup_error = f"{type(error).__name__}: {str(error).strip().splitlines()[-1]}"
            else:
                handle = future.result()
                self._handle, self._alive = handle, True
                self._last_sync = -float("inf")  # fetch the new learner's weights at the next poll
                if self._failed_before:
                    self.reconnects += 1
                return
        if now - self._last_lookup >= self.reconnect_every_s:
            self._start_lookup(now)

    def _start_lookup(self, now: float) -> None:
        self._last_lookup = now
        self._lookup = (self._find.remote(self.name, self.namespace, self.call_timeout_s).future(), now)
