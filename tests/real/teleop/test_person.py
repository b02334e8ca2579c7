"""SimulatedPerson: the seeded operator model (reaction delay, imperfect corrections, verdicts, label budget)."""

import numpy as np
import pytest
from robot_rl.envs.arm import STATE_DIM, STATE_LAYOUT, TIME_LIMITS, ArmEnv
from robot_rl.real.teleop import make_teleop
from robot_rl.real.teleop.base import Event
from robot_rl.real.teleop.person import SimulatedPerson, task_success

L = STATE_LAYOUT


def reach_state(distance: float) -> np.ndarray:
    s = np.zeros(STATE_DIM, dtype=np.float32)
    s[L["target_rel_ee"]] = [distance, 0.0, 0.0]
    return s


def episode(env, person, policy, seed):
    """One episode with the person watching; returns (task success seen by the env, reads until the verdict)."""
    obs, _ = env.reset(seed=seed)
    person.reset()
    solved, verdict_at = False, None
    for t in range(TIME_LIMITS[person.task]):
        cmd = person.read(obs)
        obs, _, _, _, info = env.step(cmd.action if cmd.active else policy(obs))
        solved = solved or bool(info["success"])
        if Event.SUCCESS in cmd.events:
            verdict_at = t
            break
    return solved, verdict_at


def test_task_success_matches_the_env():
    env = ArmEnv("push", "sparse", end_on_success=False)
    person = SimulatedPerson("push", mode="always", reaction_s=0.0, noise=0.0, drift=0.0, seed=0)
    obs, _ = env.reset(seed=1)
    agree = 0
    for _ in range(TIME_LIMITS["push"]):
        obs, _, _, _, info = env.step(person.read(obs).action)
        agree += task_success("push", obs) == bool(info["success"])
    assert agree == TIME_LIMITS["push"]
    assert task_success("arm:reach-sparse", reach_state(0.01)) and not task_success("reach", reach_state(0.05))


def test_decisions_wait_for_the_reaction_delay():
    """The scene turns bad at once; with 0.3 s at 20 Hz the person acts 6 reads after it shows, not at once."""
    first = {}
    for reaction in (0.0, 0.3):
        person = SimulatedPerson("reach", reaction_s=reaction, failing_margin=0.05, patience_s=10.0, seed=0)
        assert not any(person.read(reach_state(0.1)).active for _ in range(7))
        first[reaction] = [person.read(reach_state(0.3)).active for _ in range(10)].index(True)
    assert first == {0.0: 0, 0.3: 6}


def test_heading_for_failure_triggers_a_takeover_before_patience_runs_out():
    person = SimulatedPerson("reach", reaction_s=0.0, patience_s=5.0, failing_margin=0.03, seed=0)
    assert not person.read(reach_state(0.10)).active
    assert not person.read(reach_state(0.12)).active  # worse, but within the margin
    assert person.read(reach_state(0.15)).active and person.takeovers == 1


def test_same_seed_same_person_other_seed_other_hand():
    env = ArmEnv("push", "sparse", end_on_success=False)

    def actions(seed):
        person = SimulatedPerson("push", mode="always", seed=seed)
        obs, _ = env.reset(seed=0)
        person.reset()
        out = []
        for _ in range(20):
            a = person.read(obs).action
            out.append(a)
            obs, *_ = env.step(a)
        return np.stack(out)

    assert np.array_equal(actions(3), actions(3))
    assert not np.allclose(actions(3), actions(4))


@pytest.mark.parametrize("task", ["push", "pick_place"])
def test_the_person_demonstrates_and_gives_verdicts(task):
    """As a demonstrator (mode=always) the noisy, drifting hand still solves the task and presses SUCCESS."""
    env = ArmEnv(task, "sparse", end_on_success=False)
    person = SimulatedPerson(task, mode="always", seed=0, verdict_miss=0.0)
    results = [episode(env, person, None, seed) for seed in range(6)]
    assert sum(solved for solved, _ in results) >= 5
    assert all((at is not None) == solved for solved, at in results)


def test_corrections_rescue_a_policy_that_does_nothing():
    env = ArmEnv("push", "sparse", end_on_success=False)
    person = SimulatedPerson("push", seed=0, verdict_miss=0.0)
    results = [episode(env, person, lambda obs: np.zeros(4, np.float32), seed) for seed in range(6)]
    report = person.report()
    assert sum(solved for solved, _ in results) >= 2
    assert 0.1 < report["intervention_rate"] < 0.9 and report["takeovers_per_episode"] >= 1
    assert report["operator_minutes"] == pytest.approx(report["driving_minutes"])


def test_missed_verdicts_follow_their_rate():
    person = SimulatedPerson("reach", seed=0, verdict_miss=0.3)
    missed = 0
    for _ in range(400):
        person.reset()
        missed += person._will_miss
    assert 0.22 < missed / 400 < 0.38


def test_labels_are_bounded_noisy_and_cost_time():
    person = SimulatedPerson("push", seed=0, label_budget=300, label_error=0.1, label_s=3.0)
    answers = [person.label(True) for _ in range(300)]
    assert 0.03 < answers.count(False) / 300 < 0.17
    assert person.label(True) is None and person.labels == 300
    assert person.report()["operator_minutes"] == pytest.approx(300 * 3.0 / 60)


def test_bad_settings_name_the_key():
    with pytest.raises(ValueError, match="reaction_s"):
        SimulatedPerson("push", reaction_s=-1)
    with pytest.raises(ValueError, match="gain_range"):
        SimulatedPerson("push", gain_range=(1.0, 0.5))
    with pytest.raises(ValueError, match="mode"):
        SimulatedPerson("push", mode="sometimes")
    with pytest.raises(ValueError, match="29"):
        SimulatedPerson("push").read(np.zeros(7))


def test_make_teleop_builds_the_person():
    person = make_teleop("person", task="arm:push-sparse", seed=1)
    assert isinstance(person, SimulatedPerson) and person.task == "push"
