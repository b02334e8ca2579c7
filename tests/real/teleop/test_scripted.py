"""ScriptedTeleop on the simulated arm (demonstrations and simulated take-overs), ReplayTeleop, make_teleop."""

import numpy as np
import pytest
import torch
from robot_rl.envs.arm import STATE_DIM, STATE_LAYOUT, TIME_LIMITS, ArmEnv
from robot_rl.envs.arm.experts import ScriptedExpert
from robot_rl.real.teleop import TELEOPS, make_teleop
from robot_rl.real.teleop.base import Event, Teleop
from robot_rl.real.teleop.replay import ReplayTeleop
from robot_rl.real.teleop.scripted import ScriptedTeleop, task_progress

L = STATE_LAYOUT


def reach_state(distance: float) -> np.ndarray:
    s = np.zeros(STATE_DIM, dtype=np.float32)
    s[L["ee_pos"]] = [0.3, 0.0, 0.1]
    s[L["target_pos"]] = [0.3 + distance, 0.0, 0.1]
    s[L["target_rel_ee"]] = [distance, 0.0, 0.0]
    return s


# ---------------------------------------------------------------------- progress measure
def test_task_progress_formulas():
    s = np.zeros(STATE_DIM, dtype=np.float32)
    s[L["target_rel_ee"]] = [0.3, 0.4, 0.0]  # |.| = 0.5
    s[L["target_rel_cube"]] = [0.6, 0.8, 2.0]  # |xy| = 1.0, |xyz| = sqrt(5)
    s[L["cube_rel_ee"]] = [0.0, 0.0, 0.2]
    assert task_progress("reach", s) == pytest.approx(0.5)
    assert task_progress("push", s) == pytest.approx(1.0 + 0.1)
    assert task_progress("pick_place", s) == pytest.approx(np.sqrt(5.0) + 0.1)
    with pytest.raises(ValueError):
        task_progress("stack", s)
    with pytest.raises(ValueError):
        task_progress("reach", s[:10])


@pytest.mark.parametrize("task", ["reach", "push", "pick_place"])
def test_progress_matches_the_env_dense_reward(task):
    env = ArmEnv(task)
    obs, _ = env.reset(seed=3)
    obs, reward, *_ = env.step(np.array([0.3, -0.2, 0.1, 0.0]))
    assert task_progress(task, obs) == pytest.approx(-reward, abs=1e-5)


# ---------------------------------------------------------------------- always mode
def run_episode(env, op, policy=None, seed=0):
    """Roll out one episode; ``policy(obs)`` drives when the operator is not active. Returns (success, flags)."""
    obs, _ = env.reset(seed=seed)
    op.reset()
    flags = []
    for _ in range(TIME_LIMITS[env.task]):
        cmd = op.read(obs)
        flags.append(cmd.active)
        action = cmd.action if cmd.active else policy(obs)
        obs, _, terminated, _, info = env.step(action)
        if terminated:
            return info["success"], flags
    return False, flags


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_always_mode_solves_reach(seed):
    env = ArmEnv("reach")
    op = ScriptedTeleop("reach", mode="always", seed=seed)
    success, flags = run_episode(env, op, seed=seed)
    assert success and all(flags)
    assert op.reads == op.active_reads == len(flags)


@pytest.mark.parametrize("task", ["push", "pick_place"])
def test_always_mode_solves_the_other_tasks(task):
    env = ArmEnv(task)
    op = ScriptedTeleop(f"arm:{task}-sparse", mode="always")
    assert run_episode(env, op, seed=1)[0]


def test_read_needs_the_state():
    op = ScriptedTeleop("reach")
    with pytest.raises(ValueError, match="state"):
        op.read()
    with pytest.raises(ValueError, match="29"):
        op.read(np.zeros(13))


def test_uses_the_state_it_is_given():
    op = ScriptedTeleop("reach")
    ahead = op.read(reach_state(0.01)).action
    behind = op.read(reach_state(-0.01)).action
    assert ahead[0] == pytest.approx(0.4, abs=1e-5)  # 1 cm error at 2.5 cm per unit action
    assert behind[0] == pytest.approx(-0.4, abs=1e-5)


# ---------------------------------------------------------------------- takeover mode
def test_zero_policy_is_taken_over_then_handed_back():
    patience, steps = 5, 3
    env = ArmEnv("reach")
    op = ScriptedTeleop("reach", mode="takeover", patience=patience, takeover_steps=steps)
    obs, _ = env.reset(seed=0)
    flags, progress = [], []
    for _ in range(patience + steps + 2):
        cmd = op.read(obs)
        flags.append(cmd.active)
        progress.append(task_progress("reach", obs))
        obs, *_ = env.step(cmd.action if cmd.active else np.zeros(4))
    first = flags.index(True)
    assert first <= patience  # taken over within patience + 1 reads
    assert flags[first : first + steps] == [True] * steps
    assert not any(flags[first + steps :])  # handed back after takeover_steps
    assert progress[first + steps] < progress[first] - 0.02  # and the take-over made progress
    assert op.takeovers == 1 and op.active_reads == steps


def test_takeover_timing_is_exact_for_a_stalled_policy():
    op = ScriptedTeleop("reach", mode="takeover", patience=4, takeover_steps=3)
    flags = [op.read(reach_state(0.2)).active for _ in range(15)]
    # 4 reads for the policy (the first sets the baseline), 3 for the operator, again 4, 3, ...
    assert flags == [False] * 4 + [True] * 3 + [False] * 4 + [True] * 3 + [False]
    assert op.takeovers == 2 and op.reads == 15 and op.active_reads == 6


def test_wobbly_but_improving_policy_is_left_alone():
    op = ScriptedTeleop("reach", mode="takeover", patience=3, min_progress=0.005)
    distances = []
    for i in range(30):  # 1 cm closer every 2 reads, with a 4 mm wobble in between
        distances.append(0.4 - 0.01 * (i // 2) + (0.004 if i % 2 else 0.0))
    assert not any(op.read(reach_state(d)).active for d in distances)


@pytest.mark.parametrize("task", ["reach", "push", "pick_place"])
def test_good_policy_is_never_taken_over(task):
    env = ArmEnv(task)
    op = ScriptedTeleop(task, mode="takeover")
    for seed in range(3):
        policy_expert = ScriptedExpert(task, num_envs=1)

        def policy(obs, expert=policy_expert):
            return expert.act(torch.from_numpy(obs[None]))[0].numpy()

        success, flags = run_episode(env, op, policy, seed=seed)
        assert success and not any(flags)
    assert op.takeovers == 0 and op.active_reads == 0 and op.reads > 0


def test_reset_clears_history_and_expert_phase():
    op = ScriptedTeleop("reach", mode="takeover", patience=3, takeover_steps=5)
    calls = []
    original = op.expert.reset
    op.expert.reset = lambda env_ids=None: (calls.append(env_ids), original(env_ids))
    for _ in range(3):
        assert not op.read(reach_state(0.2)).active  # one read short of a take-over
    op.reset()
    assert calls == [None]
    assert [op.read(reach_state(0.2)).active for _ in range(4)] == [False, False, False, True]
    assert op.taking_over
    op.reset()  # also ends a take-over in progress
    assert not op.taking_over and not op.read(reach_state(0.2)).active


def test_invalid_arguments():
    with pytest.raises(ValueError, match="mode"):
        ScriptedTeleop("reach", mode="sometimes")
    with pytest.raises(ValueError, match="task"):
        ScriptedTeleop("stack")
    with pytest.raises(ValueError):
        ScriptedTeleop("reach", patience=0)
    with pytest.raises(ValueError):
        ScriptedTeleop("reach", min_progress=-1.0)


# ---------------------------------------------------------------------- replay
def test_replay_steps_flags_and_events():
    actions = np.array([[0.1, 0, 0, -1], [0, 0.2, 0, 1], [0, 0, -0.3, 1]], dtype=np.float32)
    rep = ReplayTeleop(actions, active=[True, False, True], events=[[], ["success"], "estop,rewind"])
    cmds = [rep.read() for _ in range(3)]
    np.testing.assert_array_equal(np.stack([c.action for c in cmds]), actions)
    assert [c.active for c in cmds] == [True, False, True]
    assert [c.events for c in cmds] == [frozenset(), {Event.SUCCESS}, {Event.ESTOP, Event.REWIND}]
    assert rep.done
    idle = rep.read()
    assert not idle.active and not idle.events and np.all(idle.action == 0)
    rep.reset()
    assert not rep.done and rep.read().action[0] == pytest.approx(0.1)


def test_replay_loop_and_npz_roundtrip(tmp_path):
    actions = np.array([[0.5, 0, 0, 1], [-0.5, 0, 0, -1]], dtype=np.float32)
    rep = ReplayTeleop(actions, active=False, events=[{Event.FAILURE}, []], loop=True)
    path = tmp_path / "session.npz"
    rep.save_npz(path)
    loaded = ReplayTeleop.from_npz(path, loop=True)
    for _ in range(2):  # loops
        a, b = loaded.read(), loaded.read()
        assert a.events == {Event.FAILURE} and b.events == frozenset()
        assert not a.active and a.action[0] == 0.5 and b.action[0] == -0.5
    np.savez(tmp_path / "bare.npz", actions=actions)  # actions only: active everywhere, no events
    bare = ReplayTeleop.from_npz(tmp_path / "bare.npz")
    assert len(bare) == 2 and bare.read().active


def test_replay_rejects_bad_recordings():
    with pytest.raises(ValueError, match="inside"):
        ReplayTeleop([[2.0, 0, 0, 0]])
    with pytest.raises(ValueError, match="entries"):
        ReplayTeleop([[0.0, 0, 0, 0]], events=[[], []])
    with pytest.raises(ValueError):
        ReplayTeleop([[0.0, 0, 0, 0]], events=["teleport"])
    with pytest.raises(ValueError):
        ReplayTeleop(np.zeros((0, 4)))


# ---------------------------------------------------------------------- make_teleop
@pytest.mark.parametrize(
    "name, kwargs, cls",
    [
        ("keyboard", {"fd": -1}, "KeyboardTeleop"),
        ("gamepad", {}, "GamepadTeleop"),
        ("spacemouse", {}, "SpaceMouseTeleop"),
        ("scripted", {"task": "reach"}, "ScriptedTeleop"),
        ("replay", {"actions": [[0.0, 0.0, 0.0, 0.0]]}, "ReplayTeleop"),
    ],
)
def test_make_teleop_builds_each_device(name, kwargs, cls):
    device = make_teleop(name, **kwargs)
    assert isinstance(device, Teleop) and type(device).__name__ == cls
    import robot_rl.real.teleop

    assert getattr(robot_rl.real.teleop, cls) is type(device)


def test_make_teleop_unknown_name_lists_choices():
    with pytest.raises(ValueError) as info:
        make_teleop("joystick")
    for name in TELEOPS:
        assert name in str(info.value)
