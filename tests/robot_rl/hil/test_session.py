"""The actor loop (``robot_rl.hil.session``) against a real bridge server on loopback.

What it must get right: the stored action is the one the policy proposed or the operator's as executed (after
clamps), operator steps are
flagged as interventions, rewind steps stay out of the prior buffer, labels end episodes, a re-recorded episode
never reaches the dataset, an e-stop latches the robot, and a lost learner means the robot holds.
"""

from __future__ import annotations

import numpy as np
import pytest
from robot_rl.real.client import BridgeError, RobotClient
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.server import RobotServer, ServerConfig
from robot_rl.real.teleop.base import Event, Teleop, TeleopCommand

from robot_rl.datasets import read_dataset
from robot_rl.hil.session import Session

TOKEN = "t"


class ListLink:
    """Records pushes; ``alive`` can be switched off to play a dead learner."""

    def __init__(self) -> None:
        self.chunks: list[dict[str, np.ndarray]] = []
        self.alive = True
        self.weights: dict | None = None

    def push(self, transitions: dict[str, np.ndarray]) -> None:
        self.chunks.append(transitions)

    def poll_weights(self) -> dict | None:
        w, self.weights = self.weights, None
        return w

    def cat(self, key: str) -> np.ndarray:
        return np.concatenate([c[key] for c in self.chunks])


class Script(Teleop):
    """Per-step (active, action, events) from a list; inactive once it runs out."""

    def __init__(self, steps: list[tuple[bool, list[float], set[Event]]]) -> None:
        self.steps, self.i = steps, 0

    def reset(self) -> None:
        return None

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        if self.i >= len(self.steps):
            return TeleopCommand(np.zeros(4, np.float32), False, frozenset())
        active, action, events = self.steps[self.i]
        self.i += 1
        return TeleopCommand(np.asarray(action, np.float32), active, frozenset(events))


@pytest.fixture
def client():
    # No speed governor: it would scale full-speed commands (tests/real/test_governor.py), and these tests compare
    # stored actions with the commands exactly.
    config = ServerConfig(port=0, token=TOKEN, watchdog_s=2.5, speed_governor=False)
    server = RobotServer(SimArm(task="reach", control_hz=50.0, seed=0), config)
    port = server.start()
    c = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)  # a shared VM can stall longer than 0.5 s
    try:
        yield c
    finally:
        c.close()
        server.stop()


def test_interventions_replace_the_policy_and_store_the_executed_action(client):
    link = ListLink()
    policy_action = np.array([0.0, 0.0, 0.0, -1.0])
    operator = Script([(False, [0, 0, 0, 0], set())] * 3 + [(True, [0.0, 0.0, -1.0, 1.0], set())] * 4)
    session = Session(client, policy=lambda s: policy_action, teleop=operator, link=link, time_limit=10, log=None)
    stats = session.run_episode(seed=0)
    assert stats.length == 10 and stats.interventions == 4
    assert stats.intervention_rate == pytest.approx(0.4)
    flags = link.cat("intervention")
    assert flags.tolist() == [False] * 3 + [True] * 4 + [False] * 3
    actions = link.cat("action")
    np.testing.assert_allclose(actions[:3], np.tile(policy_action, (3, 1)))
    np.testing.assert_allclose(actions[3:7, 2], -1.0)  # the operator's action, as executed
    assert link.cat("truncated")[-1] and not link.cat("truncated")[:-1].any()


def test_intervention_penalty_lands_on_the_policys_last_step_before_each_takeover(client, tmp_path):
    from robot_rl.datasets import DatasetWriter, transition_features

    link = ListLink()
    idle, drive = (False, [0, 0, 0, 0], set()), (True, [0.0, 0.0, 0.3, 0.0], set())
    operator = Script([idle] * 2 + [drive] * 2 + [idle] * 2 + [drive] + [idle] * 3)
    writer = DatasetWriter(tmp_path / "rec", fps=50, features=transition_features(29, 4), task="reach")
    session = Session(client, policy=lambda s: np.zeros(4), teleop=operator, link=link, writer=writer,
                      time_limit=10, log=None, intervention_penalty=0.5)
    session.run_episode(seed=0)
    writer.close()
    recorded = np.asarray(read_dataset(tmp_path / "rec").transitions.reward)  # the robot's own: the penalty is the learner's
    penalty = recorded - link.cat("reward")
    np.testing.assert_allclose(penalty, [0, 0.5, 0, 0, 0, 0.5, 0, 0, 0, 0], atol=1e-6)  # steps 1 and 5
    with pytest.raises(ValueError, match="intervention_penalty"):
        Session(client, intervention_penalty=-1.0, log=None)


def test_a_policy_step_stores_the_proposed_action_and_an_operator_step_the_executed_one(client):
    """Straight down long enough to reach the workspace floor, where the robot clamps: the policy's steps store what
    it proposed (the clamp is the robot's dynamics to the learner; storing the clamped action left the critic with
    no sample of the actor's own actions there), clipped to the action bounds; the operator's steps what the robot
    executed. Before, policy steps stored the clamped action (dz > -0.999 on the floor)."""
    link = ListLink()
    operator = Script([(False, [0, 0, 0, 0], set())] * 50 + [(True, [0.0, 0.0, -1.0, 0.0], set())] * 10)
    session = Session(client, policy=lambda s: np.array([0.0, 0.0, -1.5, 0.0]), teleop=operator, link=link,
                      time_limit=60, log=None)
    session.run_episode(seed=0)
    dz, states, operator_steps = link.cat("action")[:, 2], link.cat("obs"), link.cat("intervention")
    assert operator_steps.tolist() == [False] * 50 + [True] * 10
    np.testing.assert_array_equal(dz[:50], -1.0)  # proposed -1.5, clipped to the action bounds only
    assert states[:, 2].min() > 0.015  # the robot did clamp: the hand never went through the floor
    assert dz[50:].min() >= -1.0 and (dz[50:] > -0.999).all(), dz  # on the floor: the operator's, as executed


def test_ctrl_c_while_a_transition_is_handed_on_loses_none_but_the_held_back_one(client):
    """Ctrl-C (or SIGTERM) could land after the session counted a step and before it handed the previous transition to
    the learner (LocalLink.push trains there, so on a busy machine it often did): the learner then trailed the run by
    two transitions, not the one held back (the SIGTERM resume test failed on 23 steps and 21 transitions). The count
    and the hand-over now run with interrupts deferred."""
    import os
    import signal

    class InterruptedLink(ListLink):
        def push(self, transitions: dict[str, np.ndarray]) -> None:
            if len(self.chunks) == 2:
                os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives while this chunk is being handed on
            super().push(transitions)

    link = InterruptedLink()
    session = Session(client, policy=lambda s: np.zeros(4), link=link, time_limit=10, log=None)
    with pytest.raises(KeyboardInterrupt):
        session.run_episode(seed=0)
    assert len(link.chunks) == 3 and session.env_steps == 4  # the fourth step's transition is the held-back one
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_labels_rerecord_and_recording(client, tmp_path):
    from robot_rl.datasets import DatasetWriter, transition_features

    writer = DatasetWriter(tmp_path / "ds", fps=50, features=transition_features(29, 4), task="t")
    steps = [(True, [0.5, 0, 0, 0], set())] * 2 + [(True, [0, 0, 0, 0], {Event.RERECORD})]  # episode 0: dropped
    steps += [(True, [0.5, 0, 0, 0], set())] * 3 + [(True, [0, 0, 0, 0], {Event.SUCCESS})]  # episode 1
    steps += [(True, [0, 0.5, 0, 0], set()), (True, [0, 0, 0, 0], {Event.FAILURE})]  # episode 2
    session = Session(client, teleop=Script(steps), writer=writer, time_limit=50, log=None)
    session.run(episodes=3)
    writer.close()
    assert [e.label for e in session.episodes] == ["rerecord", "success", "failure"]
    data = read_dataset(tmp_path / "ds")
    assert len(data) == 4 + 2  # the re-recorded episode is not in the dataset
    assert data.intervention.all()
    assert data.transitions.terminated.sum() == 1 and data.transitions.truncated.sum() == 1


def test_rewind_steps_are_recorded_but_not_sent_as_demonstrations(client):
    link = ListLink()
    steps = [(False, [0, 0, 0, 0], set())] * 2
    steps += [(True, [-0.5, 0, 0, 0], {Event.REWIND})] + [(True, [-0.5, 0, 0, 0], set())] * 2  # rewind
    steps += [(False, [0, 0, 0, 0], set())]  # operator lets go: the rewind ends
    steps += [(True, [0.5, 0, 0, 0], set())] * 2  # a correction
    session = Session(client, policy=lambda s: np.zeros(4), teleop=Script(steps), link=link, rewind=True,
                      time_limit=8, log=None)
    stats = session.run_episode(seed=0)
    assert stats.rewind_steps == 3 and stats.interventions == 5
    assert link.cat("intervention").tolist() == [False] * 2 + [False] * 3 + [False] + [True] * 2


def test_operator_estop_latches_the_robot_and_ends_the_session(client):
    steps = [(False, [0, 0, 0, 0], set())] * 3 + [(False, [0, 0, 0, 0], {Event.ESTOP})]
    session = Session(client, policy=lambda s: np.zeros(4), teleop=Script(steps), time_limit=50, log=None)
    session.run(episodes=5)
    assert session.estopped and len(session.episodes) == 1 and session.episodes[0].label == "estop"
    assert client.status().state == "estop"


def test_a_dead_learner_means_the_robot_holds(client):
    link = ListLink()
    link.alive = False
    # 200 ticks at 50 Hz = 4 s, longer than the watchdog: only the hold steps can keep it quiet.
    session = Session(client, policy=lambda s: np.array([1.0, 0.0, 0.0, 0.0]), link=link, time_limit=200, log=None)
    before = client.status()
    stats = session.run_episode(seed=0)
    after = client.status()
    assert stats.length == 0 and stats.held_steps == 200 and link.chunks == []
    assert after.commands == before.commands  # no policy action reached the robot
    assert after.watchdog_trips == before.watchdog_trips  # the hold steps kept the session alive


def test_new_weights_are_loaded_between_steps(client):
    link = ListLink()
    loaded = []
    session = Session(client, policy=lambda s: np.zeros(4), policy_loader=loaded.append, link=link, time_limit=3,
                      log=None)
    link.weights = {"w": 1}
    session.run_episode(seed=0)
    assert loaded == [{"w": 1}]


def test_a_loop_slower_than_the_robot_counts_its_missed_ticks_and_is_told_once(client, tmp_path):
    """The HIL push runs' loop kept 12 of the robot's 20 steps a second unnoticed, so 40% of the ticks repeated a
    command and the learner's transitions spanned several ticks. A policy that takes 3 control periods (60 ms at
    50 Hz) misses at least 2 ticks a step; the warning comes once, and hil_metrics.csv has the count."""
    import csv
    import time

    def slow(state: np.ndarray) -> np.ndarray:
        time.sleep(0.06)
        return np.zeros(4)

    said: list[str] = []
    session = Session(client, policy=slow, link=ListLink(), time_limit=10, log=said.append,
                      metrics_path=tmp_path / "hil_metrics.csv")
    stats = [session.run_episode(seed=s) for s in range(2)]
    assert all(s.missed_ticks >= 2 * (s.length - 1) for s in stats)  # a busy machine only misses more
    warnings = [m for m in said if m.startswith("warning: this loop missed")]
    assert len(warnings) == 1 and "distributed=true" in warnings[0]
    with (tmp_path / "hil_metrics.csv").open() as f:
        assert [int(r["missed_ticks"]) for r in csv.DictReader(f)] == [s.missed_ticks for s in stats]


def test_a_lost_connection_ends_the_episode_cleanly_and_a_dead_server_is_reported():
    server = RobotServer(SimArm(task="reach", control_hz=50.0, seed=0), ServerConfig(port=0, token=TOKEN))
    port = server.start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=0.3, timeout_s=0.3, reset_timeout_s=0.3)
    link, calls = ListLink(), []

    def policy(state: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 4:
            server.stop()  # the robot machine goes away mid-episode
        return np.zeros(4)

    session = Session(client, policy=policy, link=link, time_limit=50, log=None, max_retries=1)
    stats = session.run_episode(seed=0)
    assert stats.label == "comm_error" and stats.length == 3 and session.comm_errors == 1
    assert link.cat("truncated").tolist() == [False, False, True]  # the cut episode still ends in the buffer
    with pytest.raises(BridgeError):
        session.run_episode(seed=1)  # the reset is retried, then the error is raised
    client.close()


def test_a_server_restart_mid_episode_ends_it_and_the_next_episode_resets():
    """Before issue 55 the old client's steps were answered OK by the restarted server, on a scene it never saw."""
    servers = [RobotServer(SimArm(task="reach", control_hz=50.0, seed=0), ServerConfig(port=0, token=TOKEN))]
    port = servers[0].start()
    client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=2.0)
    link, calls = ListLink(), []

    def policy(state: np.ndarray) -> np.ndarray:
        calls.append(1)
        if len(calls) == 4:  # serve-robot restarted on the same port (a crash and a systemd restart)
            servers[0].stop()
            servers.append(RobotServer(SimArm(task="reach", control_hz=50.0, seed=1),
                                       ServerConfig(port=port, token=TOKEN)))
            servers[-1].start()
        return np.zeros(4)

    session = Session(client, policy=policy, link=link, time_limit=8, log=None, max_retries=1)
    try:
        stats = session.run_episode(seed=0)
        assert stats.label == "comm_error" and stats.length == 3 and session.comm_errors == 1
        assert servers[-1].status().commands == 0  # the restarted server executed none of the old episode's steps
        stats = session.run_episode(seed=1)  # resets on the new server and runs
        assert stats.length == 8 and servers[-1].status().commands == 8
    finally:
        client.close()
        servers[-1].stop()


def test_a_robot_with_cameras_gives_the_policy_the_observation_dict():
    server = RobotServer(SimArm(task="reach", control_hz=20.0, seed=0, pixels=True, pixel_size=(32, 40)),
                         ServerConfig(port=0, token=TOKEN, watchdog_s=2.5))
    port = server.start()
    c = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    seen: list[dict] = []
    teleop_states: list[np.ndarray] = []

    def policy(obs):
        seen.append(obs)
        return np.array([0.2, 0.0, 0.0, -1.0], np.float32)

    class Watch(Script):
        def read(self, state=None):
            teleop_states.append(state)
            return super().read(state)

    link = ListLink()
    try:
        Session(c, policy=policy, link=link, teleop=Watch([]), time_limit=3, log=None).run(episodes=1, seed=1)
    finally:
        c.close()
        server.stop()
    assert len(seen) == 3
    for obs in seen:  # the layout of ArmEnv(pixels=True): what CameraFusion reads
        assert set(obs) == {"state", "pixels/front", "pixels/wrist"} and obs["state"].shape == (7,)
        assert obs["pixels/front"].shape == (32, 40, 3) and obs["pixels/wrist"].dtype == np.uint8
    # the operator watches the scene (a simulated robot's privileged state, 29 numbers); the learner gets the 7 of
    # proprioception and never the scene's state
    assert all(s.shape == (29,) for s in teleop_states)
    assert link.cat("obs").shape == (3, 7) and link.cat("next_obs").shape == (3, 7)
    assert set(link.chunks[0]) == {"obs", "action", "reward", "next_obs", "terminated", "truncated", "intervention"}


def test_a_pixel_learner_gets_the_frames_of_its_cameras_and_the_recording_keeps_them(tmp_path):
    """`link_cameras`: each transition carries those cameras' frames (obs and next, the next being the following
    step's obs); a writer that declares a camera's video records its frames; a camera the robot does not serve is
    one line."""
    from robot_rl.datasets import DatasetWriter, transition_features
    from robot_rl.hil.learner import check_transitions

    server = RobotServer(SimArm(task="reach", control_hz=20.0, seed=0, pixels=True, pixel_size=(32, 40)),
                         ServerConfig(port=0, token=TOKEN, watchdog_s=2.5))
    port = server.start()
    c = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    link = ListLink()
    writer = DatasetWriter(tmp_path / "episodes", fps=20, task="reach",
                           features=transition_features(7, 4, images={"front": (32, 40)}))
    try:
        with pytest.raises(ValueError, match="link_cameras: the robot serves no pixels/side"):
            Session(c, link=link, link_cameras=("pixels/side",), log=None)
        session = Session(c, policy=lambda obs: np.array([0.3, 0.0, 0.1, -1.0], np.float32), link=link,
                          writer=writer, link_cameras=("pixels/wrist",), time_limit=4, log=None)
        session.run(episodes=1, seed=1)
    finally:
        writer.close()
        c.close()
        server.stop()
    assert len(link.chunks) == 4
    for chunk in link.chunks:
        assert check_transitions(chunk, 7, 4, {"pixels/wrist": (32, 40, 3)}) == 1
    obs, nxt = link.cat("obs/pixels/wrist"), link.cat("next_obs/pixels/wrist")
    assert np.array_equal(obs[1:], nxt[:-1]) and not np.array_equal(obs[0], obs[-1])  # the arm moved
    data = read_dataset(tmp_path / "episodes", load_images=True)
    assert set(data.transitions.cameras) == {"pixels/front"} and data.transitions.obs["pixels/front"].shape == (
        4, 32, 40, 3)


def test_success_frames_record_the_succeeded_scene_for_the_classifier_but_not_for_the_learner(tmp_path):
    """success_frames=3: after the operator's SUCCESS the robot holds for 3 ticks, recorded as terminal successes
    (action zeros, not interventions) so `robot-rl classifier` gets positive frames; the learner's episode ended at
    the success (nothing after it reaches the link). Without them the episode has no positive frame (this failed
    the whole console loop's classifier step)."""
    from robot_rl.classifier_train import load_labelled_frames
    from robot_rl.datasets import DatasetWriter, transition_features

    server = RobotServer(SimArm(task="reach", control_hz=20.0, seed=0, pixels=True, pixel_size=(32, 40)),
                         ServerConfig(port=0, token=TOKEN, watchdog_s=2.5))
    port = server.start()
    c = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=5.0)
    steps = [(True, [0.5, 0, 0, 0], set())] * 2 + [(True, [0.5, 0, 0, 0], {Event.SUCCESS})]
    try:
        with pytest.raises(ValueError, match="success_frames must be an int >= 0"):
            Session(c, success_frames=-1, log=None)
        for frames, name in ((3, "with"), (0, "without")):
            link = ListLink()
            writer = DatasetWriter(tmp_path / name, fps=20, task="reach",
                                   features=transition_features(7, 4, images={"front": (32, 40)}))
            session = Session(c, teleop=Script(list(steps)), link=link, writer=writer, time_limit=50, log=None,
                              success_frames=frames)
            session.run(episodes=1, seed=1)
            writer.close()
            assert [e.label for e in session.episodes] == ["success"]
            assert len(link.chunks) == 3 and link.cat("terminated").tolist() == [False, False, True]
    finally:
        c.close()
        server.stop()
    data = read_dataset(tmp_path / "with")
    assert len(data) == 3 + 3
    assert data.success.tolist() == [False, False, True, True, True, True]
    assert data.transitions.terminated.tolist() == [False, False, True, True, True, True]
    assert data.intervention.tolist() == [True] * 3 + [False] * 3
    assert np.all(data.transitions.action[3:].numpy() == 0)
    assert int(load_labelled_frames(tmp_path / "with").label.sum()) == 3  # frames 3..5: the scene after success
    assert int(load_labelled_frames(tmp_path / "without").label.sum()) == 0


def test_the_operators_estop_works_during_success_frames(client, tmp_path):
    from robot_rl.datasets import DatasetWriter, transition_features

    writer = DatasetWriter(tmp_path / "ds", fps=50, features=transition_features(29, 4), task="t")
    steps = [(True, [0.5, 0, 0, 0], set()), (True, [0, 0, 0, 0], {Event.SUCCESS}), (False, [0, 0, 0, 0], set()),
             (False, [0, 0, 0, 0], {Event.ESTOP})]
    session = Session(client, teleop=Script(steps), writer=writer, time_limit=50, log=None, success_frames=10)
    session.run(episodes=3)
    writer.close()
    assert session.estopped and len(session.episodes) == 1
    assert client.status().state == "estop"
    assert len(read_dataset(tmp_path / "ds")) == 2 + 1  # one success frame before the e-stop
