"""The actor-learner link over Ray: weights flow, a dead learner never blocks the control loop, a restarted
learner resumes from its checkpoint and is found again, a dead actor never hangs the learner.

One Ray session for the module (starting Ray costs seconds). pytest-timeout is not installed, so every wait here
has its own deadline instead.

"Never blocks" is checked two ways. Structurally: while the control loop runs, a spy on the Ray API of this
process records every call that can wait (``ray.get`` on an unfinished result, ``ray.wait`` with a timeout, and
``ray.get_actor``, which waits on Ray's control store while holding the GIL, ~130 ms per miss on this machine, so
it must not run in the actor's process at all, not even in a background thread). And by the clock, with bounds
loose enough for two shared cores, where even pure computation is now and then held up for 10-300 ms: each
iteration's "held" time (wall time minus the time the thread sat runnable waiting for a CPU) must stay well below
the link's call timeout, which any wait on a hung learner would last.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ray = pytest.importorskip("ray")

from ray_support import init_ray_or_skip  # noqa: E402
from robot_rl.policies import TanhGaussianActor  # noqa: E402

from robot_rl.agents.sac import EncoderConfig, NetworkConfig, OptimiserConfig, SACConfig  # noqa: E402
from robot_rl.hil.distributed import CHECKPOINT_FILE, RayLink, connect_learner, start_learner  # noqa: E402
from robot_rl.hil.learner import LearnerConfig  # noqa: E402

NAMESPACE = "robot_rl_test_distributed"
OBS, ACT = 3, 2
HIDDEN = [16, 16]
UTD = 0.25  # few updates: the learner shares two cores with the loop being timed
LEARNING_STARTS = 10
PERIOD_S = 0.02  # the actor's 50 Hz control period
CALL_TIMEOUT_S = 2.0
MAX_HELD_S = 0.75  # well below CALL_TIMEOUT_S, which a wait on a hung learner lasts
MEDIAN_ITERATION_S = 0.010  # push + poll typically take 0.1-2 ms here
_started: list = []  # actors to kill after each test


@pytest.fixture(scope="module", autouse=True)
def ray_session():
    # Workers cannot import this test module, so what the Pusher actor below uses from it travels by value.
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    init_ray_or_skip(num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=NAMESPACE)
    yield
    ray.shutdown()


@pytest.fixture(autouse=True)
def kill_actors():
    """A failed test must not leave its learner holding a CPU that the next test's learner needs."""
    yield
    while _started:
        ray.kill(_started.pop())


def config() -> LearnerConfig:
    sac = SACConfig(network=NetworkConfig(hidden_dims=HIDDEN), optimiser=OptimiserConfig(batch_size=16))
    return LearnerConfig(
        obs_dim=OBS,
        action_dim=ACT,
        sac=sac,
        capacity=10_000,
        prior_capacity=1_000,
        learning_starts=LEARNING_STARTS,
        utd=UTD,
    )


def chunk(n: int = 1, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "obs": rng.normal(size=(n, OBS)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": rng.normal(size=(n, OBS)).astype(np.float32),
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "intervention": rng.uniform(size=n) < 0.2,
    }


def launch(name: str, run_dir: Path, **kw):
    handle = start_learner(name, config(), run_dir, NAMESPACE, threads=1, **kw)
    _started.append(handle)
    return handle


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory):
    """One learner for the tests that do not kill it (a learner process takes 5+ s to start here)."""
    run_dir = tmp_path_factory.mktemp("shared")
    handle = start_learner("shared", config(), run_dir, NAMESPACE, threads=1, checkpoint_every_s=0.5)
    ray.get(handle.ping.remote(), timeout=120.0)  # a new process imports torch: slow on a busy machine
    yield handle, run_dir
    ray.kill(handle)


def make_link(name: str, **kw) -> RayLink:
    options = {"sync_every_s": 0.1, "call_timeout_s": CALL_TIMEOUT_S, "reconnect_every_s": 0.2, "max_buffered": 10_000}
    return RayLink(name, NAMESPACE, **{**options, **kw})


def wait_for(predicate, timeout_s: float, what: str, step_s: float = 0.05, diagnose=None):
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f": {diagnose()}" if diagnose is not None else ""
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}{detail}")
        time.sleep(step_s)


def stats_of(handle, timeout_s: float = 10.0) -> dict:
    return ray.get(handle.stats.remote(), timeout=timeout_s)


def settled(handle, timeout_s: float = 30.0) -> dict:
    """Stats once every acknowledged chunk is stored and every owed update made."""
    return wait_for(
        lambda: (s := stats_of(handle))["queued_chunks"] == 0 and s["pending_updates"] == 0 and s,
        timeout_s,
        "the learner to store its queue and make its owed updates",
    )


def _runqueue_wait_s() -> float:
    """Time this thread has spent runnable but waiting for a CPU (Linux schedstat), 0.0 where unavailable."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class RaySpy:
    """Records Ray calls that can wait: in push/poll (`in_iteration`), or any lookup while the loop runs."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.in_iteration = False
        self.loop_running = False
        self.violations: list[str] = []
        real_get, real_wait, real_get_actor = ray.get, ray.wait, ray.get_actor

        def get(refs, *args, **kwargs):
            if self.in_iteration:
                listed = refs if isinstance(refs, list) else [refs]
                ready, _ = real_wait(listed, num_returns=len(listed), timeout=0)
                if len(ready) < len(listed):
                    self.violations.append("ray.get of an unfinished result")
            return real_get(refs, *args, **kwargs)

        def wait(refs, *args, **kwargs):
            if self.in_iteration and kwargs.get("timeout") != 0:
                self.violations.append(f"ray.wait(timeout={kwargs.get('timeout')})")
            return real_wait(refs, *args, **kwargs)

        def get_actor(*args, **kwargs):
            if self.loop_running:  # from any thread: it holds the GIL while it waits
                self.violations.append(f"ray.get_actor in {threading.current_thread().name}")
            return real_get_actor(*args, **kwargs)

        monkeypatch.setattr(ray, "get", get)
        monkeypatch.setattr(ray, "wait", wait)
        monkeypatch.setattr(ray, "get_actor", get_actor)


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> RaySpy:
    return RaySpy(monkeypatch)


class ControlLoop:
    """A 50 Hz actor loop: one push and one poll per period, each iteration timed, Ray calls spied on."""

    def __init__(self, link: RayLink, spy: RaySpy) -> None:
        self.link, self.spy = link, spy
        self.iteration_s: list[float] = []
        self.held_s: list[float] = []
        self.weights: list[dict[str, torch.Tensor]] = []
        self.step = 0

    def run(self, iterations: int | None = None, until=None, max_s: float = 30.0) -> float:
        """Run for `iterations` periods (or until `until()` is true); returns the wall time taken."""
        self.iteration_s, self.held_s = [], []
        start = time.monotonic()
        next_tick = start
        done = 0
        self.spy.loop_running = True
        try:
            while (iterations is None or done < iterations) and not (until is not None and until()):
                assert time.monotonic() - start < max_s, f"control loop ran past {max_s}s: {self.link.stats()}"
                data = chunk(1, seed=self.step)
                self.spy.in_iteration = True
                q0, t0 = _runqueue_wait_s(), time.perf_counter()
                self.link.push(data)
                weights = self.link.poll_weights()
                wall = time.perf_counter() - t0
                self.spy.in_iteration = False
                self.iteration_s.append(wall)
                self.held_s.append(wall - (_runqueue_wait_s() - q0))
                if weights is not None:
                    self.weights.append(weights)
                self.step += 1
                done += 1
                next_tick += PERIOD_S
                time.sleep(max(0.0, next_tick - time.monotonic()))
        finally:
            self.spy.in_iteration = self.spy.loop_running = False
        return time.monotonic() - start

    def assert_never_blocked(self) -> None:
        wall, held = np.asarray(self.iteration_s), np.asarray(self.held_s)
        summary = f"push+poll over {wall.size} iterations: wall p50 {np.median(wall) * 1e3:.2f} ms, p95 "
        summary += f"{np.percentile(wall, 95) * 1e3:.2f} ms, max {wall.max() * 1e3:.2f} ms; held max "
        summary += f"{held.max() * 1e3:.2f} ms; calls that could wait: {self.spy.violations[:5]}"
        print(summary)
        assert not self.spy.violations, summary
        assert held.max() < MAX_HELD_S, summary
        assert np.median(wall) < MEDIAN_ITERATION_S, summary


def test_pushed_chunks_train_the_learner_and_newer_weights_come_back(shared, spy: RaySpy) -> None:
    learner, run_dir = shared
    before = settled(learner)
    link = make_link("shared")  # no handle: it connects through its own lookup
    wait_for(lambda: (link.poll_weights(), link.alive)[1], 60.0, "the link to find the learner")

    loop = ControlLoop(link, spy)
    loop.run(iterations=100)
    loop.assert_never_blocked()
    assert link.flush(timeout_s=30.0)
    s = settled(learner)
    assert s["transitions"] - before["transitions"] == loop.step == link.stats()["sent_transitions"], link.stats()
    assert s["updates"] == int(UTD * (s["transitions"] - LEARNING_STARTS)) > before["updates"]
    assert s["interventions"] == s["prior_size"] > 0

    loop.run(until=lambda: link.weights_version >= s["published_version"], max_s=30.0)
    assert link.alive and link.stats()["failures"] == 0
    assert len(loop.weights) >= 2 and link.weights_version > 0
    first, last = loop.weights[0], loop.weights[-1]
    assert any(not torch.equal(first[k], last[k]) for k in first)  # the weights did change on the way
    actor = TanhGaussianActor(OBS, ACT, HIDDEN)
    actor.load_state_dict(last)
    assert (run_dir / CHECKPOINT_FILE).is_file() and s["checkpoints"] >= 1  # periodic checkpoints


def test_learner_crash_never_blocks_the_actor_and_a_restarted_learner_is_found(tmp_path: Path, spy: RaySpy) -> None:
    learner = launch("crashy", tmp_path, checkpoint_every_s=1000.0)
    link = make_link("crashy", handle=connect_learner("crashy", NAMESPACE, timeout_s=120.0))
    assert link.alive
    loop = ControlLoop(link, spy)
    loop.run(iterations=50)
    assert link.flush(timeout_s=30.0)
    settled(learner)
    ray.get(learner.save.remote(), timeout=30.0)
    saved = stats_of(learner)["transitions"]
    assert saved == 50

    # (b) mid-run the learner first hangs (SIGSTOP: alive to Ray, answering nothing), then crashes (SIGKILL). The
    # loop keeps its period throughout; the link declares the learner dead once a call is call_timeout_s overdue.
    # Signals rather than ray.kill from a timer thread: ray.kill holds this process's GIL while it waits on Ray's
    # control store, which the loop would be charged for, and a crash is what the test is about.
    pid = stats_of(learner)["pid"]
    hang = threading.Timer(0.3, os.kill, args=(pid, signal.SIGSTOP))
    crash = threading.Timer(2.7, os.kill, args=(pid, signal.SIGKILL))
    hang.start()
    crash.start()
    try:
        loop.run(iterations=150)
    finally:
        hang.join()
        crash.join()
    loop.assert_never_blocked()
    dead = link.stats()
    assert not link.alive and dead["failures"] >= 1 and dead["timeouts"] >= 1, dead
    assert dead["queued"] > 0  # chunks wait for the next learner

    # (c) a new learner under the same name (start_learner releases the name the crashed one still holds) resumes
    # from the checkpoint; the link finds it on its own and weights flow again.
    learner2 = launch("crashy", tmp_path, checkpoint_every_s=1000.0)
    syncs_before = link.weight_syncs
    loop.run(until=lambda: link.alive and link.weight_syncs > syncs_before, max_s=60.0)
    loop.assert_never_blocked()
    assert link.stats()["reconnects"] >= 1  # more if the loaded machine made a call miss its deadline
    assert link.flush(timeout_s=30.0)
    s = settled(learner2)
    assert s["restored"]
    # The count continues from the checkpoint, plus everything delivered after the reconnect (chunks queued
    # while the learner was dead included); what the first learner took after its checkpoint died with it.
    assert s["transitions"] == saved + link.stats()["sent_transitions"] - dead["sent_transitions"]


def test_a_dead_actor_never_hangs_the_learner(shared) -> None:
    learner, _ = shared
    start = stats_of(learner)["transitions"]

    @ray.remote(num_cpus=0)
    class Pusher:
        """An actor process pushing at 100 Hz from a thread, until it is killed."""

        def __init__(self) -> None:
            self.link = RayLink("shared", NAMESPACE, sync_every_s=0.05)
            threading.Thread(target=self._loop, daemon=True).start()

        def _loop(self) -> None:
            i = 0
            while True:
                self.link.push(chunk(2, seed=i))
                self.link.poll_weights()
                i += 1
                time.sleep(0.01)

        def stats(self) -> dict:
            return self.link.stats()

    pusher = Pusher.remote()
    _started.append(pusher)
    wait_for(
        lambda: stats_of(learner)["transitions"] >= start + 100,
        60.0,
        "the pusher to feed the learner",
        diagnose=lambda: (stats_of(learner), ray.get(pusher.stats.remote(), timeout=10.0)),
    )
    ray.kill(pusher)  # mid-stream: calls of its may be under way

    before = stats_of(learner)
    latencies = []
    for _ in range(10):  # the learner keeps answering (every call within stats_of's deadline), promptly...
        t0 = time.monotonic()
        stats_of(learner, timeout_s=10.0)
        latencies.append(time.monotonic() - t0)
        time.sleep(0.05)
    assert np.median(latencies) < 0.25, latencies  # typically ~5 ms; the bound leaves room for a loaded machine
    # ...and keeps training: it makes the updates it owes, then trains on what arrives next.
    s = settled(learner)
    assert s["updates"] >= before["updates"] and s["training"] and s["train_error"] is None
    ray.get(learner.add.remote(chunk(8, seed=999)), timeout=10.0)  # earns UTD * 8 = 2 updates
    wait_for(lambda: stats_of(learner)["updates"] == s["updates"] + 2, 30.0, "updates on new data")


def test_without_a_learner_pushes_queue_up_to_the_bound_and_the_oldest_are_dropped(spy: RaySpy) -> None:
    link = make_link("nobody", max_buffered=5)
    loop = ControlLoop(link, spy)
    loop.run(iterations=20)
    loop.assert_never_blocked()
    s = link.stats()
    assert not link.alive and s["queued"] == 5 and s["dropped"] == 15 and s["dropped_transitions"] == 15
    assert link.poll_weights() is None and not link.flush(timeout_s=0.1)


def test_camera_frames_travel_to_a_pixel_learner_and_actor_plus_encoder_weights_come_back(tmp_path: Path) -> None:
    """hil-train from cameras over Ray: chunks with uint8 frames (`obs/pixels/<camera>`, `next_obs/...`) go through
    the link (queued, merged) into a pixel learner's frame buffers, and the weights it publishes load into the
    robot side's actor + encoder (`build_policy`)."""
    from robot_rl.hil.learner import build_policy, frame_keys

    cameras = {"pixels/front": [8, 8, 3]}
    sac = SACConfig(network=NetworkConfig(hidden_dims=[8]),
                    encoder=EncoderConfig(feature_dim=4, channels=2, layers=1),
                    optimiser=OptimiserConfig(batch_size=4))
    cfg = LearnerConfig(obs_dim=OBS, action_dim=ACT, sac=sac, capacity=200, prior_capacity=100, learning_starts=4,
                        utd=0.5, cameras=cameras)
    handle = start_learner("pixels", cfg, tmp_path, NAMESPACE, threads=1)
    _started.append(handle)
    ray.get(handle.ping.remote(), timeout=120.0)
    link = make_link("pixels", handle=handle)
    key, next_key = frame_keys("pixels/front")
    for step in range(12):
        c = chunk(1, seed=step)
        c[key] = np.full((1, 8, 8, 3), step, np.uint8)
        c[next_key] = np.full((1, 8, 8, 3), step + 1, np.uint8)
        link.push(c)
    bad = chunk(1)  # a chunk without the learner's camera is refused by the learner, and counted
    link.push(bad)
    assert link.flush(timeout_s=30.0)
    s = settled(handle)
    assert s["transitions"] == 12 and s["updates"] == 4 and link.stats()["rejected"] == 1
    weights = wait_for(lambda: link.poll_weights(), 30.0, "the pixel learner's weights")
    policy = build_policy(cfg)
    policy.load_state_dict(weights)
    assert any(k.startswith("encoder.") for k in weights)
