"""The hub's late labels and the console's dataset writer that holds a finished episode for them (no browser)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from robot_rl.console.hub import ConsoleWriter, Hub, relabelled
from robot_rl.datasets import read_dataset
from robot_rl.datasets.format import ACTION, NEXT_STATE, STATE
from robot_rl.hil.connect import dataset_writer


def _spec() -> Any:
    """The served push arm's spec (what a session's client reports)."""
    from robot_rl.real.drivers.sim_arm import SimArm

    return SimArm(task="push", control_hz=20.0, seed=0).spec


def _frames(length: int, success_at: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(length)
    success = np.zeros(length, bool)
    if success_at is not None:
        success[success_at] = True
    done = np.zeros(length, bool)
    done[-1] = True
    return {STATE: rng.normal(size=(length, 29)).astype(np.float32), ACTION: rng.uniform(-1, 1, (length, 4)).astype(np.float32),
            "next.reward": np.zeros(length, np.float32), "next.done": done, "next.terminated": success.copy(),
            "next.truncated": done & ~success, "next.success": success,
            NEXT_STATE: rng.normal(size=(length, 29)).astype(np.float32), "intervention": np.zeros(length, bool)}


def _episode(hub: Hub, writer: ConsoleWriter, number: int, frames: dict) -> int | None:
    """What a session does: reset (the hub's new episode), then the episode's end (write)."""
    hub.episode, hub.running = number, True
    return writer.write_episode(frames, task="push")


def test_a_finished_episode_takes_a_late_label_until_the_next_one_ends(tmp_path):
    spec = _spec()
    hub = Hub(spec)
    base = dataset_writer(str(tmp_path / "d"), spec, False, "push", cameras=False)
    writer = ConsoleWriter(base, hub)
    assert hub.add_label("success", 0) is not None  # nothing has run
    assert _episode(hub, writer, 0, _frames(12)) is None  # held, not yet recorded
    assert hub.held == 0 and not hub.running and base.num_episodes == 0
    assert hub.add_label("success", 0) is None  # late: the time limit ran out, the operator says it worked
    assert _episode(hub, writer, 1, _frames(8, success_at=7)) == 0  # episode 0 recorded as episode 1 ends
    refused = hub.add_label("failure", 0)
    assert "no longer waits for its recording" in refused and "episode 1 can still be labelled" in refused
    assert hub.add_label("rerecord", 1) is None  # episode 1 is left out
    assert _episode(hub, writer, 2, _frames(5)) is None
    assert hub.add_label("failure", 2) is None and hub.add_label("bogus", 2).startswith("unknown label")
    assert writer.flush() == 1  # the console's close records the held one
    assert writer.flush() is None
    base.close()
    data = read_dataset(tmp_path / "d")
    episodes = data.episode_index.numpy()
    assert sorted(set(episodes.tolist())) == [0, 1] and (episodes == 0).sum() == 12 and (episodes == 1).sum() == 5
    success = data.success.numpy()
    assert success[episodes == 0].tolist() == [False] * 11 + [True]  # the late success: the last row
    assert not success[episodes == 1].any()  # the late failure


def test_relabelled_success_marks_the_last_row_and_failure_clears_all():
    frames = _frames(6, success_at=2)
    assert relabelled(frames, "success")["next.success"].tolist() == [False] * 5 + [True]
    assert not relabelled(frames, "failure")["next.success"].any()
    assert frames["next.success"][2]  # the caller's frames are not changed
    with pytest.raises(ValueError, match="success, failure or rerecord"):
        relabelled(frames, "maybe")
