"""Keyboard teleop: key -> robot-frame action, auto-repeat decay, toggles, events, terminal handling."""

import io
import os
import termios
import time

import numpy as np
import pytest
from robot_rl.real.teleop.base import Event
from robot_rl.real.teleop.keyboard import KeyboardTeleop


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def wait_for(predicate, timeout=3.0):
    """Poll until ``predicate()`` is true (the reader thread runs asynchronously)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError("condition not reached in time")


def make(**kwargs):
    clock = FakeClock()
    kb = KeyboardTeleop(fd=-1, clock=clock, speed=kwargs.pop("speed", 1.0), **kwargs)
    return kb, clock


@pytest.mark.parametrize(
    "key, expected",
    [
        (b"w", [1, 0, 0]),  # forward = away from the operator = robot +x (operator behind the robot)
        (b"s", [-1, 0, 0]),
        (b"a", [0, 1, 0]),  # operator's left = robot's left = +y
        (b"d", [0, -1, 0]),
        (b"r", [0, 0, 1]),
        (b"f", [0, 0, -1]),
        (b"W", [1, 0, 0]),  # caps lock does not change the meaning
    ],
)
def test_motion_keys_in_robot_base_frame(key, expected):
    kb, _ = make()
    kb.feed(key)
    cmd = kb.read()
    np.testing.assert_allclose(cmd.action, [*expected, -1.0])
    assert cmd.action.dtype == np.float32


def test_rotated_frame_operator_beside_robot():
    kb, _ = make(frame="robot_right")  # yaw 90: standing on the robot's right, facing its left
    kb.feed(b"w")
    np.testing.assert_allclose(kb.read().action[:3], [0, 1, 0], atol=1e-7)
    kb.feed(b"a")  # forward + left: left is robot -x
    np.testing.assert_allclose(kb.read().action[:3], [-1, 1, 0], atol=1e-7)


def test_speed_scales_motion_and_keys_combine():
    kb, _ = make(speed=0.5)
    kb.feed(b"wa")
    np.testing.assert_allclose(kb.read().action[:3], [0.5, 0.5, 0.0])
    kb.feed(b"s")  # opposite key on the same axis replaces the direction
    np.testing.assert_allclose(kb.read().action[:3], [-0.5, 0.5, 0.0])


def test_motion_decays_after_the_last_press():
    kb, clock = make(hold_s=0.15)
    kb.feed(b"w")
    clock.t += 0.1
    assert kb.read().action[0] == 1.0
    clock.t += 0.1  # 0.2 s after the press
    assert kb.read().action[0] == 0.0


def test_auto_repeat_burst_moves_steadily_then_stops():
    kb, clock = make(hold_s=0.15)
    start = clock.t
    for i in range(10):  # a held key: repeats every 33 ms
        clock.t = start + 0.033 * i
        kb.feed(b"d")
        clock.t += 0.02
        assert kb.read().action[1] == -1.0
    last = start + 0.033 * 9
    clock.t = last + 0.1
    assert kb.read().action[1] == -1.0
    clock.t = last + 0.2
    np.testing.assert_array_equal(kb.read().action[:3], [0.0, 0.0, 0.0])


def test_gripper_toggle():
    kb, _ = make()
    assert kb.read().action[3] == -1.0  # starts open
    kb.feed(b"g")
    assert kb.read().action[3] == 1.0 and kb.gripper_closed
    kb.feed(b"g")
    assert kb.read().action[3] == -1.0


def test_takeover_toggle():
    kb, _ = make()
    assert not kb.read().active
    kb.feed(b"t")
    assert kb.read().active
    assert kb.read().active  # stays on until toggled
    kb.feed(b"t")
    assert not kb.read().active


def test_events_are_reported_once():
    kb, _ = make()
    kb.feed(b"pxnb ")
    cmd = kb.read()
    assert cmd.events == {Event.SUCCESS, Event.FAILURE, Event.RERECORD, Event.REWIND, Event.ESTOP}
    assert kb.read().events == frozenset()
    kb.feed(b"q1")  # unmapped keys do nothing
    cmd = kb.read()
    assert cmd.events == frozenset() and not cmd.active
    np.testing.assert_array_equal(cmd.action, [0, 0, 0, -1])


@pytest.mark.parametrize(
    "chunks",
    [
        [b"\x1b[A", b"\x1b[B", b"\x1b[C", b"\x1b[D"],  # arrows: would read as a (left), b (REWIND), d (right)
        [b"\x1b", b"[", b"B"],  # a sequence split across reads
        [b"\x1b[1;5D"],  # ctrl+left, with parameters
        [b"\x1bOB", b"\x1bOD"],  # SS3 arrows (application cursor mode)
        [b"\x1bb"],  # alt+b
    ],
)
def test_escape_sequences_are_not_keys(chunks):
    kb, _ = make()
    for chunk in chunks:
        kb.feed(chunk)
    cmd = kb.read()
    assert cmd.events == frozenset()
    np.testing.assert_array_equal(cmd.action, [0, 0, 0, -1])
    kb.feed(b"w")  # the parser is back to plain keys afterwards
    assert kb.read().action[0] == 1.0


def test_reset_clears_state_but_keeps_estop():
    kb, _ = make()
    kb.feed(b"wtgp ")
    kb.reset()
    cmd = kb.read()
    np.testing.assert_array_equal(cmd.action, [0, 0, 0, -1])
    assert not cmd.active
    assert cmd.events == {Event.ESTOP}


def test_reads_a_pipe_in_a_background_thread():
    r, w = os.pipe()
    kb = KeyboardTeleop(fd=r, speed=1.0, hold_s=5.0)
    try:
        kb.connect()
        os.write(w, b"tw")
        cmd = wait_for(lambda: (c := kb.read()).active and c.action[0] == 1.0 and c)
        assert cmd.action[0] == 1.0
        os.write(w, b"p")
        wait_for(lambda: Event.SUCCESS in kb.read().events)
    finally:
        kb.disconnect()
        kb.disconnect()  # safe twice
        os.close(w)
        os.close(r)


def test_reader_stops_on_eof():
    r, w = os.pipe()
    kb = KeyboardTeleop(fd=r)
    kb.connect()
    os.close(w)
    wait_for(lambda: not kb._thread.is_alive())
    kb.disconnect()
    os.close(r)


def test_terminal_is_put_in_cbreak_mode_and_restored():
    master, slave = os.openpty()
    try:
        before = termios.tcgetattr(slave)
        assert before[3] & termios.ICANON  # a fresh pty is in canonical (line-buffered) mode
        kb = KeyboardTeleop(fd=slave, hold_s=5.0)
        kb.connect()
        during = termios.tcgetattr(slave)
        assert not during[3] & termios.ICANON and not during[3] & termios.ECHO
        os.write(master, b"t")  # no newline needed in cbreak mode
        wait_for(lambda: kb.read().active)
        kb.disconnect()
        assert termios.tcgetattr(slave) == before
    finally:
        os.close(master)
        os.close(slave)


def test_stdin_that_is_not_a_terminal_is_refused(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(""))  # no fileno at all
    with pytest.raises(RuntimeError, match="terminal"):
        KeyboardTeleop().connect()
    r, w = os.pipe()
    try:
        monkeypatch.setattr("sys.stdin", os.fdopen(os.dup(r), "r"))  # a pipe, not a tty
        with pytest.raises(RuntimeError, match="terminal"):
            KeyboardTeleop().connect()
    finally:
        os.close(r)
        os.close(w)


def test_invalid_arguments():
    with pytest.raises(ValueError):
        KeyboardTeleop(speed=0.0)
    with pytest.raises(ValueError):
        KeyboardTeleop(hold_s=0.0)
