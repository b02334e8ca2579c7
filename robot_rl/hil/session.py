"""The actor's loop on a robot: policy, operator and recording, one control tick per step.

``Session`` is what ``robot-rl teleop`` (operator only, recording demonstrations), ``robot-rl deploy`` (a fixed
policy, the operator can still take over or e-stop) and ``robot-rl hil-train`` (a learning policy with a learner
link) run. Each step:

1. the policy proposes an action for the latest state (none while the learner is lost, see below);
2. the operator's device is read; while the operator is **active** its action replaces the policy's and the step
   is an **intervention** (HIL-SERL);
3. the action goes to the robot (one control tick); the transition stores the operator's action as the robot
   *executed* it, after the robot-side safety clamps (``applied_action``), and the policy's action as *proposed*
   (within the action bounds). The clamps (workspace box, step limit) are a function of the measured state and the
   action, so to the learner they are part of the robot's dynamics, as the simulator's own workspace clip is in
   ``robot-rl train``. Storing the clamped policy action instead left the critic without a single sample of what
   the actor proposes wherever a clamp bites: on push the hand rests on the table, 68% of the steps were clamped
   (the actor asking for dz -0.81 on average, the buffer holding -0.07), the critic valued states of episodes that
   failed 97% of the time at ~0.48, and hil-train learned nothing (5% success at 12k steps against RLPD's 20-45%);
   ``bench/results/hil_push/`` has the runs before and after;
4. the transition goes to the learner link: every transition to the online buffer, interventions also to the
   prior (demo) buffer (the learner does the routing from the ``intervention`` flag);
5. the step is recorded; episodes are written to the dataset when they end, interventions marked.

Success frames (``success_frames``, for a success classifier's labels): the dataset's row t holds the frame before
action t and its ``next.success`` the verdict after it, so an episode that ends at its success records no frame of the
scene succeeded, and ``robot-rl classifier`` (frame t is a success when row t-1 says so) gets no positive from it.
With ``success_frames=N`` and a recording, a successful episode goes on for N more ticks in which the robot holds
(no command), each recorded as a terminal success (``next.success`` and ``next.terminated``, action zeros, not an
intervention; not sent to the learner, whose episode ended at the success): N frames of the succeeded scene, as
HIL-SERL's operators hold the success key. Record demonstrations for behaviour cloning without them.

Operator events: ``SUCCESS`` / ``FAILURE`` end the episode with that label (success is terminal, failure is a
truncation, so the learner bootstraps through it); ``RERECORD`` ends it and leaves it out of the dataset;
``ESTOP`` latches the robot's e-stop and ends the session; ``REWIND`` (with ``rewind=True``, after RaC) marks the
operator's following active stretch as a rewind: the robot is driven back to a familiar state before the
correction. Rewind steps are recorded (flag ``intervention``) and go to the online buffer, but not to the prior
buffer, because driving backwards is not a demonstration of the task.

Observations: the policy sees the state vector, or, from a robot with cameras (``spec.cameras``), the observation
dict ``{"state": ..., "pixels/<camera>": uint8 (H, W, 3)}`` (``RobotObservation.as_dict``: the groups a pixel policy
trained on the simulated ``-pixels`` tasks reads). The operator's device gets the state vector; the learner link gets
the state plus, for a learner that reads cameras (``link_cameras``, hil-train from pixels), each of those cameras'
frames as ``obs/pixels/<camera>`` and ``next_obs/pixels/<camera>`` (``robot_rl.hil.learner.frame_keys``); the recorded
dataset gets the state plus the frames of each camera the writer declares a video for
(``observation.images.<camera>``, as ``robot-rl collect`` records camera demos).

Learned reward: with a ``reward_model`` (hil-train ``reward_classifier=<dir>``, a
``robot_rl.classifier_reward.LearnedReward``) the actor judges every observation an action led to, and the
transition's reward and success come from it instead of the robot's: success ends the episode as the operator's
``SUCCESS`` does (terminal), and the robot's own success no longer does. The model is reset at every episode start
(its success streak never spans two episodes). The robot's own return and success stay in the metrics
(``driver_return``, ``driver_success``).

Transport errors: a step that misses its deadline or finds the server unreachable ends the episode (label
``comm_error``; its last transition is marked as truncated) and the session goes on with a new one; a reset is
retried ``max_retries`` times before the error is raised. A lost camera frame (``CameraError``: the robot's frame
was bad or did not decode; the step was applied) is handled the same way. An e-stop latched on the robot ends the session.

Control rate: the robot ticks at its own rate and holds its pose on a tick that no command reached (a missed
tick), so a loop slower than the robot records transitions that span several ticks, which are not the task's.
Each step's reply carries the robot's tick number; ``EpisodeStats.missed_ticks`` counts the ticks that passed
between two of the loop's steps, and the first episode that misses over ``MISSED_TICKS_WARNING`` of its ticks is
reported with what to do (a busy CPU; with ``hil-train``, training in this process).

Learner loss: when the link reports the learner dead, the session stops sending policy actions and holds the
robot (one hold per tick, so the heartbeat and the control rate continue) until the link is back. The operator
can still drive.
"""

from __future__ import annotations

import csv
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import grpc
import numpy as np

from robot_rl.real.client import BridgeError, CameraError, EpisodeChanged, EStopLatched, RobotClient
from robot_rl.real.robot import RobotObservation
from robot_rl.real.teleop.base import Event, Teleop
from robot_rl.signals import interrupts_deferred


class Link(Protocol):
    """The actor's view of a learner (``robot_rl.hil.learner.LocalLink``, ``robot_rl.hil.distributed.RayLink``)."""

    @property
    def alive(self) -> bool: ...

    def push(self, transitions: dict[str, np.ndarray]) -> None: ...

    def poll_weights(self) -> dict[str, Any] | None: ...


class RewardModel(Protocol):
    """A learned reward on the client side (``robot_rl.classifier_reward.LearnedReward``)."""

    def reset(self) -> None: ...

    def __call__(self, obs: dict[str, np.ndarray]) -> tuple[float, bool]: ...


Policy = Callable[[Any], np.ndarray]  # state vector, or the observation dict on a robot with cameras
_TRANSIENT = {grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE}


def _transient(e: BridgeError) -> bool:
    """Errors that end an episode (or are retried by a reset) rather than the session: the server restarted or
    someone else reset the robot (``EpisodeChanged``) ends the episode too, and the next one resets."""
    return e.code in _TRANSIENT or isinstance(e, CameraError | EpisodeChanged)


MISSED_TICKS_WARNING = 0.1  # the fraction of an episode's ticks missed (see the module docstring) that is reported


@dataclass
class EpisodeStats:
    episode: int
    env_steps: int  # total over the session, at the end of this episode
    length: int
    ret: float
    success: bool
    interventions: int
    intervention_rate: float
    rewind_steps: int
    label: str  # "success", "failure", "timeout", "rerecord", "estop"
    held_steps: int  # ticks held because the learner was lost and the operator idle
    wall_s: float
    driver_return: float = 0.0  # the robot's own return (= ret without a reward model)
    driver_success: bool = False  # the robot reported success on some step of the episode
    missed_ticks: int = 0  # the robot's ticks between two of this loop's steps: the robot held on each
    takeovers: int = 0  # stretches of operator steps: how often the person had to step in

    @property
    def ticks(self) -> int:
        """The robot's ticks the episode spanned: its steps, the held ones and the missed ones."""
        return self.length + self.held_steps + self.missed_ticks

    @property
    def missed_tick_rate(self) -> float:
        return self.missed_ticks / self.ticks if self.ticks else 0.0


@dataclass
class _Episode:
    states: list[np.ndarray] = field(default_factory=list)
    actions: list[np.ndarray] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    driver_rewards: list[float] = field(default_factory=list)
    driver_success: bool = False
    next_states: list[np.ndarray] = field(default_factory=list)
    terminated: list[bool] = field(default_factory=list)
    truncated: list[bool] = field(default_factory=list)
    success: list[bool] = field(default_factory=list)
    intervention: list[bool] = field(default_factory=list)
    images: dict[str, list[np.ndarray]] = field(default_factory=dict)  # recorded camera name -> frames of each step

    def add(self, state: np.ndarray, action: np.ndarray, reward: float, nxt: RobotObservation, terminated: bool,
            truncated: bool, success: bool, intervention: bool, frames: dict[str, np.ndarray]) -> None:
        """One recorded step: ``nxt`` is the robot's reply, ``frames`` the recorded cameras' frames before it."""
        self.states.append(state)
        self.actions.append(action)
        self.rewards.append(reward)
        self.driver_rewards.append(float(nxt.reward))
        self.next_states.append(nxt.state)
        self.terminated.append(terminated)
        self.truncated.append(truncated)
        self.success.append(success)
        self.intervention.append(intervention)
        for name, frame in frames.items():
            self.images.setdefault(name, []).append(frame)


class Session:
    """Runs episodes on one robot. See the module docstring.

    Args:
        client: the robot.
        policy: observation -> action in [-1, 1] (the state vector, or on a robot with cameras the observation
            dict, see the module docstring), or None for a tick it has no action for (the robot holds); None
            for pure teleoperation.
        policy_loader: called with new weights from the link (hil-train).
        policy_reset: called at the start of every episode (clears a chunked policy's queued actions).
        teleop: the operator's device, or None.
        link: learner link, or None (no learning).
        writer: a ``robot_rl.datasets.DatasetWriter`` to record every episode into, or None.
        rewind: enable RaC-style rewind segments.
        time_limit: episode length in steps (default: the robot's).
        metrics_path: CSV file of per-episode statistics (appended).
        log: where the one line per episode goes.
        task: task description stored with each recorded episode.
        max_retries: attempts to reset the robot again after a transient transport error.
        link_cameras: camera groups (``pixels/<camera>``, of ``spec.cameras``) whose frames every transition to
            the link carries: those the learner reads (a ValueError names one the robot does not serve).
        reward_model: the learned reward that replaces the robot's (see the module docstring), or None.
        intervention_penalty: subtracted from the reward of the policy's last step before the operator takes over,
            in the transition sent to the link only (the recorded dataset keeps the robot's reward): RLIF's
            intervention signal (Luo et al., ICLR 2024) beside the task reward. 0: off.
        success_frames: with a ``writer``, ticks recorded after an episode's success with the robot holding (see the
            module docstring); 0: none.
        executed: called after every step with what the robot executed (``applied_action``; None for a held
            tick), the operator's actions included (a delay-aware policy's actions in flight,
            ``robot_rl.envs.delay.InFlightActions.sent``), and for a policy step the ticks between the observation
            the policy acted on and the tick that applied its action, less one (0: applied at the next tick, as in
            a simulator without delay; None for other steps and an episode's first): the observation-to-action
            delay the bridge sees (inference, transport, queueing; not a driver's own sensing or actuation latency,
            which the server cannot see).
    """

    def __init__(
        self,
        client: RobotClient,
        *,
        policy: Policy | None = None,
        policy_loader: Callable[[dict[str, Any]], None] | None = None,
        policy_reset: Callable[[], None] | None = None,
        teleop: Teleop | None = None,
        link: Link | None = None,
        writer: Any = None,
        rewind: bool = False,
        time_limit: int | None = None,
        metrics_path: str | Path | None = None,
        log: Callable[[str], None] | None = print,
        task: str | None = None,
        max_retries: int = 5,
        link_cameras: Sequence[str] = (),
        reward_model: RewardModel | None = None,
        intervention_penalty: float = 0.0,
        executed: Callable[[np.ndarray | None, int | None], None] | None = None,
        success_frames: int = 0,
    ) -> None:
        if isinstance(success_frames, bool) or not isinstance(success_frames, int) or success_frames < 0:
            raise ValueError(f"success_frames must be an int >= 0, got {success_frames!r}")
        self.success_frames = success_frames
        if not (math.isfinite(intervention_penalty) and intervention_penalty >= 0):
            raise ValueError(f"intervention_penalty must be a finite number >= 0, got {intervention_penalty}")
        self.intervention_penalty = float(intervention_penalty)
        self.client, self.policy, self.policy_loader, self.policy_reset = client, policy, policy_loader, policy_reset
        self.teleop, self.link, self.writer, self.rewind = teleop, link, writer, rewind
        spec = client.spec()
        self.action_dim = spec.action_dim
        self._action_low, self._action_high = np.asarray(spec.action_low), np.asarray(spec.action_high)
        self.pixels = bool(spec.cameras)  # the policy gets the observation dict
        served = [c.group for c in spec.cameras]
        unserved = [g for g in link_cameras if g not in served]
        if unserved:
            raise ValueError(f"link_cameras: the robot serves no {unserved[0]} (its cameras: "
                             f"{', '.join(served) or 'none'})")
        self.link_cameras = tuple(link_cameras)
        self.reward_model = reward_model
        self.recorded_cameras: dict[str, str] = {}  # camera name -> the video feature the writer records it as
        if writer is not None and spec.cameras:
            from robot_rl.datasets.format import camera_feature

            declared = getattr(writer, "features", {})
            self.recorded_cameras = {c.name: camera_feature(c.group) for c in spec.cameras
                                     if camera_feature(c.group) in declared}
        self.time_limit = time_limit or spec.time_limit or 1000
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.log, self.task = log, task
        self.env_steps = 0
        self.episodes: list[EpisodeStats] = []
        self.estopped = False
        self.comm_errors = 0
        self.warned_missed_ticks = False  # the slow-loop warning is given once per session
        self.max_retries = max_retries
        self.executed = executed

    def run(self, episodes: int | None = None, steps: int | None = None, seed: int | None = None) -> list[EpisodeStats]:
        """Run until ``episodes`` episodes or ``steps`` env steps (whichever comes first) or an operator e-stop."""
        if episodes is None and steps is None:
            raise ValueError("give episodes or steps")
        n = 0
        while not self.estopped:
            if episodes is not None and n >= episodes:
                break
            if steps is not None and self.env_steps >= steps:
                break
            self.run_episode(None if seed is None else seed + n)
            n += 1
        return self.episodes

    def run_episode(self, seed: int | None = None) -> EpisodeStats:
        t0 = time.monotonic()
        first = self._reset(seed)
        state, view, current = first.state, self._view(first), first
        if self.teleop is not None:
            self.teleop.reset()
        if self.policy_reset is not None:  # a chunked policy's queued actions belong to the last episode
            self.policy_reset()
        if self.reward_model is not None:  # a success streak belongs to its episode
            self.reward_model.reset()
        ep = _Episode()
        label, rewinding, rewind_steps, held = "timeout", False, 0, 0
        last_tick, missed = None, 0  # the robot's tick of the last reply, the ticks no step of this loop reached
        # Each transition is handed to the learner one step late, so that the last one of an episode cut short
        # (e-stop, lost connection) can still be marked as the end of its episode, and the policy's last step
        # before a takeover can carry the intervention penalty.
        pending: dict[str, np.ndarray] | None = None
        pending_operator = False  # whether the operator drove the pending transition
        for t in range(self.time_limit):
            self._sync_weights()
            # a simulated operator watches the scene (a simulated robot's privileged state) as a person would
            cmd = self.teleop.read(state if current.privileged_state is None else current.privileged_state) \
                if self.teleop is not None else None
            events = cmd.events if cmd is not None else frozenset()
            if Event.ESTOP in events:
                self.client.estop("operator e-stop")
                self.estopped, label = True, "estop"
                break
            if self.rewind and Event.REWIND in events:
                rewinding = True
            operator = cmd is not None and cmd.active
            if operator:
                action = np.asarray(cmd.action, np.float64)
            elif self.policy is not None and (self.link is None or self.link.alive):
                proposed = self.policy(view)  # None: the policy has nothing for this tick (a served chunk is late)
                action = None if proposed is None else np.asarray(proposed, np.float64)
                rewinding = False  # a rewind lasts while the operator drives
            else:
                action = None
                rewinding = False
            try:
                r = self.client.step(action)  # None: hold this tick; the loop keeps the control rate
            except EStopLatched:
                self.estopped, label = True, "estop"
                break
            except BridgeError as e:
                if not _transient(e):
                    raise
                self.comm_errors += 1
                self._say(f"warning: {e}; ending the episode and starting a new one")
                label = "comm_error"
                break
            late = None  # ticks between the observation the policy acted on and its action's tick, less one
            if last_tick is not None:
                missed += max(0, r.tick - last_tick - 1)
                if action is not None and not operator:
                    late = max(0, r.tick - last_tick - 1)
            last_tick = r.tick
            if self.executed is not None:
                self.executed(None if action is None else r.applied_action, late)
            if action is None:
                state, view, current = r.observation.state, self._view(r.observation), r.observation
                held += 1
                continue
            if operator:  # step 3 of the module docstring: the operator's as executed, the policy's as proposed
                stored = r.applied_action if r.applied_action is not None else np.zeros(self.action_dim)
            else:
                stored = np.clip(action, self._action_low, self._action_high)
            nxt = r.observation
            reward, judged = float(nxt.reward), bool(nxt.success)
            if self.reward_model is not None:
                reward, judged = self.reward_model(nxt.as_dict())
            ep.driver_success = ep.driver_success or bool(nxt.success)
            success = judged or Event.SUCCESS in events
            terminated = success
            truncated = not terminated and (t + 1 >= self.time_limit or Event.FAILURE in events
                                            or Event.RERECORD in events)
            rewind_step = operator and rewinding
            rewind_steps += int(rewind_step)
            # Counted and handed on as one: a Ctrl-C or SIGTERM in between would lose this step's transition
            # on top of the one held back (robot_rl.signals.interrupts_deferred).
            with interrupts_deferred():
                ep.add(state, np.asarray(stored, np.float32), reward, nxt, terminated, truncated, success, operator,
                       self._recorded_frames(current))
                self.env_steps += 1
                if self.link is not None:
                    if pending is not None:
                        if operator and not pending_operator:  # the operator takes over from the policy here
                            pending["reward"][0] -= self.intervention_penalty
                        self.link.push(pending)
                    pending_operator = operator
                    pending = {
                        "obs": state[None].astype(np.float32),
                        "action": np.asarray(stored, np.float32)[None],
                        "reward": np.array([reward], np.float32),
                        "next_obs": nxt.state[None].astype(np.float32),
                        "terminated": np.array([terminated]),
                        "truncated": np.array([truncated]),
                        # Rewind steps are real transitions (online buffer) but not demonstrations (prior buffer).
                        "intervention": np.array([operator and not rewind_step]),
                        **self._frames(current, nxt),
                    }
                state, view, current = nxt.state, self._view(nxt), nxt
            if Event.RERECORD in events:
                label = "rerecord"
                break
            if terminated:
                label = "success"
                if self.success_frames and self.writer is not None:
                    state, current = self._record_success_frames(ep, state, current)
                break
            if Event.FAILURE in events:
                label = "failure"
                break
        if pending is not None:
            if not (pending["terminated"][0] or pending["truncated"][0]):
                pending["truncated"][0] = True
            self.link.push(pending)
        return self._finish(ep, label, rewind_steps, held, t0, missed)

    def _record_success_frames(self, ep: _Episode, state: np.ndarray, current: RobotObservation
                               ) -> tuple[np.ndarray, RobotObservation]:
        """``success_frames`` held ticks after a success, recorded as terminal successes (the module docstring).
        A transport error or an e-stop ends them early (an e-stop also ends the session); the episode stays."""
        zeros = np.zeros(self.action_dim, np.float32)
        for _ in range(self.success_frames):
            if self.teleop is not None:  # the operator's e-stop key still works while the robot holds
                cmd = self.teleop.read(state if current.privileged_state is None else current.privileged_state)
                if Event.ESTOP in cmd.events:
                    self.client.estop("operator e-stop")
                    self.estopped = True
                    break
            try:
                r = self.client.step(None)
            except EStopLatched:
                self.estopped = True
                break
            except BridgeError as e:
                if not _transient(e):
                    raise
                self.comm_errors += 1
                self._say(f"warning: {e}; the success frames end here")
                break
            nxt = r.observation
            reward = float(nxt.reward)
            if self.reward_model is not None:
                reward, _ = self.reward_model(nxt.as_dict())
            with interrupts_deferred():
                ep.add(state, zeros, reward, nxt, True, False, True, False, self._recorded_frames(current))
            state, current = nxt.state, nxt
        return state, current

    def _recorded_frames(self, obs: RobotObservation) -> dict[str, np.ndarray]:
        """The frames of ``obs`` the recording keeps (``recorded_cameras``)."""
        return {name: obs.images[name] for name in self.recorded_cameras}

    def _frames(self, obs: RobotObservation, nxt: RobotObservation) -> dict[str, np.ndarray]:
        """The link cameras' frames of one transition, uint8 [1, H, W, 3] under ``obs/<group>``/``next_obs/<group>``."""
        if not self.link_cameras:
            return {}
        from robot_rl.hil.learner import frame_keys

        out = {}
        for group in self.link_cameras:
            name = group[len("pixels/"):]
            key, next_key = frame_keys(group)
            out[key], out[next_key] = obs.images[name][None], nxt.images[name][None]
        return out

    def _view(self, obs: RobotObservation) -> Any:
        """What the policy sees: the state vector, or the observation dict on a robot with cameras."""
        return obs.as_dict() if self.pixels else obs.state

    def _reset(self, seed: int | None) -> RobotObservation:
        """Reset the robot, retrying transient transport errors a few times (a hiccup must not end a long run)."""
        for attempt in range(self.max_retries + 1):
            try:
                return self.client.reset(seed)
            except BridgeError as e:
                if not _transient(e) or attempt == self.max_retries:
                    raise
                self.comm_errors += 1
                self._say(f"warning: {e}; retrying the reset ({attempt + 1}/{self.max_retries})")
                time.sleep(0.5 * (attempt + 1))
        raise AssertionError("unreachable")

    def _say(self, message: str) -> None:
        if self.log is not None:
            self.log(message)

    def _sync_weights(self) -> None:
        if self.link is None or self.policy_loader is None:
            return
        weights = self.link.poll_weights()
        if weights is not None:
            self.policy_loader(weights)

    def _finish(self, ep: _Episode, label: str, rewind_steps: int, held: int, t0: float, missed: int = 0
                ) -> EpisodeStats:
        length = len(ep.actions)
        if length and self.writer is not None and label != "rerecord":
            from robot_rl.datasets.format import ACTION, NEXT_STATE, STATE

            if not (ep.terminated[-1] or ep.truncated[-1]):
                ep.truncated[-1] = True  # e-stop mid-episode: the recording still ends cleanly
            done = np.array(ep.terminated) | np.array(ep.truncated)
            self.writer.write_episode(
                {
                    STATE: np.stack(ep.states).astype(np.float32),
                    ACTION: np.stack(ep.actions),
                    "next.reward": np.array(ep.rewards, np.float32),
                    "next.done": done,
                    "next.terminated": np.array(ep.terminated),
                    "next.truncated": np.array(ep.truncated),
                    "next.success": np.array(ep.success),
                    NEXT_STATE: np.stack(ep.next_states).astype(np.float32),
                    "intervention": np.array(ep.intervention),
                    **{feature: np.stack(ep.images[name]) for name, feature in self.recorded_cameras.items()},
                },
                task=self.task,
            )
        interventions = int(sum(ep.intervention))
        takeovers = sum(1 for i, on in enumerate(ep.intervention) if on and (i == 0 or not ep.intervention[i - 1]))
        stats = EpisodeStats(
            episode=len(self.episodes),
            env_steps=self.env_steps,
            length=length,
            ret=float(sum(ep.rewards)),
            success=bool(ep.success and ep.success[-1]),
            interventions=interventions,
            intervention_rate=interventions / length if length else 0.0,
            rewind_steps=rewind_steps,
            label=label,
            held_steps=held,
            wall_s=time.monotonic() - t0,
            driver_return=float(sum(ep.driver_rewards)),
            driver_success=ep.driver_success,
            missed_ticks=missed,
            takeovers=takeovers,
        )
        self.episodes.append(stats)
        if self.metrics_path is not None:
            new = not self.metrics_path.exists()
            self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
            fields = list(asdict(stats))
            if not new:  # a run resumed from an older version keeps its file's columns
                with self.metrics_path.open(newline="") as f:
                    fields = next(csv.reader(f), None) or fields
            with self.metrics_path.open("a", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
                if new:
                    w.writeheader()
                w.writerow(asdict(stats))
        if self.log is not None:
            self.log(
                f"[episode {stats.episode}] steps {self.env_steps:,} | {label} | return {stats.ret:.2f} | "
                f"length {length} | interventions {interventions} ({100 * stats.intervention_rate:.0f}%) in {takeovers} "
                f"take-over(s)"
                + (f" | held {held}" if held else "")
                + (f" | missed ticks {missed}" if missed else "")
                + (f" | robot's own return {stats.driver_return:.2f}" if self.reward_model is not None else "")
            )
        if self.log is not None and not self.warned_missed_ticks and stats.missed_tick_rate > MISSED_TICKS_WARNING:
            self.warned_missed_ticks = True
            self.log(f"warning: this loop missed {missed} of the robot's {stats.ticks} ticks in episode {stats.episode} "
                     f"({100 * stats.missed_tick_rate:.0f}%): it runs slower than the robot's control rate, and the robot "
                     "holds its pose on every missed tick, so the recorded transitions span several ticks. Give it the "
                     "CPU (other processes; fewer threads=); with hil-train, distributed=true moves the learner out "
                     "of this loop (told once per session; hil_metrics.csv has missed_ticks per episode)")
        return stats
