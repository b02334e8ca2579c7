"""What the console shows, gathered where the session runs, and the wrappers that gather it.

The session thread (``robot_rl.hil.session.Session``) never waits for the console: each wrapper copies a reference
or a few numbers into ``Hub`` under a short lock and wakes the web server's event loop; encoding frames for the
page, reading the robot's status and answering the page all happen on the console's own threads.

- ``ConsoleClient`` wraps the ``RobotClient`` the session steps through: every reply's observation (frames, state,
  reward) and who drove that tick; at each episode boundary the finished episodes and the learner's counters.
- ``ConsoleTeleop`` wraps the operator's device (or stands in for none): whether the operator is driving, and the
  page's labels delivered as the device's own ``SUCCESS`` / ``FAILURE`` / ``RERECORD`` events, so they end and
  label the episode exactly as a key on the device does and land in the recorded dataset's ``next.success``, which
  ``robot-rl classifier`` (the label rounds) reads.
- ``ConsoleReward`` wraps a learned reward: its probability and threshold for the page.
- ``ConsoleWriter`` wraps the dataset writer: where each recorded episode's camera videos are. It holds each
  finished episode until the next one ends (or the session closes), so the page can still label it: a *late*
  label, given after the episode ended (a time limit ran out while the operator watched). A late success marks the
  episode's last row ``next.success``, a late failure clears them, a late re-record leaves the episode out; the
  episode's transitions that a learner already received keep their rewards (the label is for the recorded
  dataset, which the classifier's label rounds read). A process killed outright (SIGKILL) loses the held episode;
  Ctrl-C and SIGTERM record it.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.real.teleop.base import Event, Teleop, TeleopCommand

LABELS = {"success": Event.SUCCESS, "failure": Event.FAILURE, "rerecord": Event.RERECORD}


@dataclass
class Tick:
    """One reply of the robot as the session received it."""

    seq: int  # console's own count of replies (the page acknowledges frames by it)
    episode: int  # the console's episode number (0-based, counts resets)
    step: int  # steps of the episode so far
    driver: str  # "policy", "operator", "hold" (no command: learner lost, operator idle) or "reset"
    observation: Any  # robot_rl.real.robot.RobotObservation
    # Upper bound on when the frames were taken, on time.monotonic(): the tick that made them began after the step
    # request was sent plus its queueing time (StepReply.queue_s); the frames were rendered inside that tick.
    taken_by: float
    applied: list[float] | None = None
    prob: float | None = None  # the learned reward's probability of this observation (None: no classifier)


@dataclass
class EpisodeRow:
    """One finished episode as the page lists and plots it."""

    episode: int
    label: str
    ret: float
    success: bool
    length: int
    interventions: int
    intervention_rate: float
    takeovers: int
    missed_ticks: int
    robot_minutes: float  # robot time at its end, all episodes so far (ticks / control rate)
    updates: float | None  # the learner's updates at the sync that saw it (None: no learner)
    updates_per_robot_s: float | None  # learner updates per robot second since the previous sync
    videos: dict[str, str] = field(default_factory=dict)  # camera -> URL path of its recorded video


class Hub:
    """The console's shared state (see the module docstring). ``notify`` is called after every change, from
    whichever thread made it; the web server sets it to wake its event loop."""

    def __init__(self, spec: Any, threshold: float | None = None) -> None:
        self.spec = spec
        self.control_hz = float(spec.control_hz)
        self.threshold = threshold
        self._lock = threading.Lock()
        self._sync_lock = threading.Lock()
        self.notify: Callable[[], None] = lambda: None
        self.tick: Tick | None = None
        self.seq = 0
        self.episode = -1  # no episode yet
        self.step = 0
        self.running = False  # an episode is in progress (labels apply to it)
        self.operator_active = False
        self.prob: float | None = None
        self.episodes: list[EpisodeRow] = []
        self.drivers: deque[str] = deque(maxlen=400)  # who drove the last ticks (the page's strip)
        self._labels: deque[Event] = deque()
        self._ticks_total = 0
        self._last_updates: tuple[float, float] | None = None  # (updates, robot seconds) at the previous sync
        self._session: Any = None
        self._videos: dict[int, dict[str, str]] = {}  # dataset episode -> camera -> URL path
        self.video_files: dict[str, Path] = {}  # URL path -> file
        self._dataset_episode_of: dict[int, int] = {}  # console episode -> dataset episode
        self.held: int | None = None  # the finished episode whose recording waits for a late label (ConsoleWriter)
        self._late: dict[int, str] = {}  # console episode -> its late label
        self.episodes_version = 0  # bumped at every change of the episode rows (the page is sent them again)

    # -- from the session thread -------------------------------------------------------------------------------
    def bind(self, session: Any) -> None:
        self._session = session

    def publish(self, observation: Any, taken_by: float, driver: str, applied: Any = None) -> None:
        with self._lock:
            self.seq += 1
            self.step += driver != "reset"
            self.drivers.append(driver)
            self.tick = Tick(self.seq, self.episode, self.step, driver, observation, taken_by,
                             None if applied is None else [float(v) for v in applied], self.prob)
        self.notify()

    def begin_episode(self) -> None:
        """A reset succeeded: the previous episode (if any) has ended and been recorded."""
        self.sync()
        with self._lock:
            # the session's own numbering (EpisodeStats.episode), so labels and rows name the same episode
            self.episode = len(self._session.episodes) if self._session is not None else self.episode + 1
            self.step = 0
            self.running = True
            self._labels.clear()  # a label is for the episode it was given in

    def sync(self) -> None:
        """Take the session's finished episodes and the learner's counters: at each reset (session thread) and twice
        a second from the console's poller, which shows an episode that ended the run. The learner's counters are
        plain numbers, read without waiting for it."""
        with self._sync_lock:  # the session thread at a reset, the console's poller after an episode: once each
            self._sync()

    def _sync(self) -> None:
        session = self._session
        if session is None:
            return
        done = session.episodes[len(self.episodes):]
        if not done:
            return
        stats = session.link.stats() if getattr(session, "link", None) is not None else {}
        updates = stats.get("updates")
        rows = []
        for e in done:
            self._ticks_total += e.ticks
            label = f"{self._late[e.episode]} (late)" if e.episode in self._late else e.label
            rows.append(EpisodeRow(e.episode, label, float(e.ret), bool(e.success), e.length, e.interventions,
                                   float(e.intervention_rate), e.takeovers, e.missed_ticks,
                                   self._ticks_total / self.control_hz / 60.0,
                                   None if updates is None else float(updates), None,
                                   self._videos.get(self._dataset_episode_of.get(e.episode, -1), {})))
        robot_s = self._ticks_total / self.control_hz
        if updates is not None:
            if self._last_updates is not None and robot_s > self._last_updates[1]:
                rate = (float(updates) - self._last_updates[0]) / (robot_s - self._last_updates[1])
            else:
                rate = float(updates) / robot_s if robot_s else 0.0
            for row in rows:
                row.updates_per_robot_s = rate
            self._last_updates = (float(updates), robot_s)
        with self._lock:
            self.episodes.extend(rows)
            self.running = False
            self.episodes_version += 1
        self.notify()

    def recorded(self, dataset_episode: int, videos: dict[str, Path], episode: int | None = None) -> None:
        """The writer committed console episode `episode` (default: the current one) as `dataset_episode` with
        these camera videos."""
        paths = {}
        for camera, path in videos.items():
            url = f"/video/{dataset_episode}/{camera}.mp4"
            self.video_files[url] = path
            paths[camera] = url
        with self._lock:
            episode = self.episode if episode is None else episode
            self._videos[dataset_episode] = paths
            self._dataset_episode_of[episode] = dataset_episode
            for row in self.episodes:  # a held episode's row was listed before it was recorded
                if row.episode == episode:
                    row.videos = paths
                    self.episodes_version += 1
        self.notify()

    def hold(self, episode: int) -> None:
        """`episode` has ended and waits for its recording: a label for it is a late label until then."""
        with self._lock:
            self.held = episode
            self.running = False  # ended: a label now is a late one (the queue of the running episode is not read)
            self.episodes_version += 1
        self.notify()

    def take_late_label(self, episode: int) -> str | None:
        """The late label of held `episode` (None: none), which is being recorded now: later labels are refused."""
        with self._lock:
            if self.held == episode:
                self.held = None
                self.episodes_version += 1
            return self._late.get(episode)

    def take_labels(self) -> frozenset[Event]:
        with self._lock:
            labels = frozenset(self._labels)
            self._labels.clear()
        return labels

    # -- from the page -----------------------------------------------------------------------------------------
    def add_label(self, label: str, episode: int) -> str | None:
        """Queue a label for the episode in progress, or keep a late label for the finished episode that waits for
        its recording (``held``; the last one given counts); the reason it was refused, or None."""
        event = LABELS.get(label)
        if event is None:
            return f"unknown label {label!r}; labels: {', '.join(LABELS)}"
        with self._lock:
            if self.running and episode == self.episode:
                self._labels.append(event)
                return None
            if self.held is None or episode != self.held:
                now = self.episode if self.running else "none"
                held = "" if self.held is None else f"; episode {self.held} can still be labelled"
                return (f"episode {episode} is not in progress (now: {now}) and no longer waits for its recording "
                        f"(a finished episode can be labelled until the next one ends){held}")
            self._late[episode] = label
            for row in self.episodes:
                if row.episode == episode:
                    row.label = f"{label} (late)"
            self.episodes_version += 1
        self.notify()
        return None

    def episodes_snapshot(self) -> tuple[int, list[dict[str, Any]], int | None]:
        """(version, the episode rows as dicts, the held episode) for the page, taken together."""
        with self._lock:
            rows = [{**vars(e), "videos": dict(e.videos)} for e in self.episodes]
            return self.episodes_version, rows, self.held

    def snapshot(self) -> tuple[Tick | None, list[EpisodeRow], list[str]]:
        with self._lock:
            return self.tick, list(self.episodes), list(self.drivers)


class ConsoleClient:
    """A ``RobotClient`` that tells the hub about every reply; everything else goes to the client unchanged."""

    def __init__(self, client: Any, hub: Hub, teleop: ConsoleTeleop) -> None:
        self._client, self._hub, self._teleop = client, hub, teleop

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def reset(self, seed: int | None = None) -> Any:
        t0 = time.monotonic()
        obs = self._client.reset(seed)  # a failed reset is retried by the session: no new episode yet
        self._hub.begin_episode()
        self._hub.publish(obs, max(t0, time.monotonic() - 1.0 / self._hub.control_hz), "reset")
        return obs

    def step(self, action: np.ndarray | None) -> Any:
        t0 = time.monotonic()
        result = self._client.step(action)
        driver = "hold" if action is None else "operator" if self._teleop.active else "policy"
        self._hub.publish(result.observation, t0 + result.queue_s, driver, result.applied_action)
        return result


class ConsoleTeleop(Teleop):
    """The operator's device (or none) with the page's labels added to its events."""

    def __init__(self, device: Teleop | None, hub: Hub, action_dim: int) -> None:
        self.device, self._hub = device, hub
        self.action_dim = action_dim
        self.active = False

    def connect(self) -> None:
        if self.device is not None:
            self.device.connect()

    def disconnect(self) -> None:
        if self.device is not None:
            self.device.disconnect()

    def reset(self) -> None:
        if self.device is not None:
            self.device.reset()

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        cmd = self.device.read(state) if self.device is not None else \
            TeleopCommand(np.zeros(self.action_dim, np.float32))
        self.active = bool(cmd.active)
        labels = self._hub.take_labels()
        return TeleopCommand(cmd.action, cmd.active, frozenset(cmd.events) | labels) if labels else cmd

    def __getattr__(self, name: str) -> Any:  # a device's own extras (report(), ...)
        if name == "device":
            raise AttributeError(name)
        return getattr(self.device, name)


class ConsoleReward:
    """A learned reward (``LearnedReward``) whose probability the hub shows beside the frames."""

    def __init__(self, model: Any, hub: Hub) -> None:
        self._model, self._hub = model, hub

    def reset(self) -> None:
        self._model.reset()

    def __call__(self, obs: Any) -> tuple[float, bool]:
        out = self._model(obs)
        self._hub.prob = float(self._model.last_prob)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)


class ConsoleWriter:
    """A ``DatasetWriter`` that holds each finished episode until the next one ends, for a late label from the page
    (see the module docstring), and tells the hub where each recorded episode's camera videos are. ``flush`` (the
    console's ``close``) records the held one."""

    def __init__(self, writer: Any, hub: Hub) -> None:
        self._writer, self._hub = writer, hub
        self._held: tuple[int, Any, str | None] | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._writer, name)

    def write_episode(self, frames: Any, task: str | None = None) -> int | None:
        """Record the episode held before (its dataset index, None if none or re-recorded) and hold this one."""
        with self._lock:
            index = self._record_held()
            self._held = (self._hub.episode, frames, task)
            self._hub.hold(self._hub.episode)
        return index

    def flush(self) -> int | None:
        """Record the held episode now (its dataset index, None if none or re-recorded)."""
        with self._lock:
            return self._record_held()

    def _record_held(self) -> int | None:
        from robot_rl.datasets.format import chunk_file

        if self._held is None:
            return None
        episode, frames, task = self._held
        self._held = None
        late = self._hub.take_late_label(episode)
        if late == "rerecord":
            return None
        if late is not None:
            frames = relabelled(frames, late)
        index = self._writer.write_episode(frames, task=task)
        videos = {}
        for key in self._writer.video_keys:
            # the newest file of the feature is this episode's (one file per episode, numbered in order)
            files = sorted(Path(self._writer.root, "videos", key).glob("chunk-*/file-*.mp4"), key=chunk_file)
            if files:
                videos[key.rsplit(".", 1)[-1]] = files[-1]
        self._hub.recorded(index, videos, episode)
        return index


def relabelled(frames: Any, label: str) -> dict[str, Any]:
    """An episode's frames with a late label: ``success`` marks the last row's ``next.success`` (a success label
    on the device ends the episode there, and the classifier reads frame t's label from row t-1), ``failure``
    clears every row's."""
    success = np.zeros(len(frames["next.success"]), dtype=bool)
    if label == "success":
        success[-1] = True
    elif label != "failure":
        raise ValueError(f"a late label is success, failure or rerecord, got {label!r}")
    return {**frames, "next.success": success}
