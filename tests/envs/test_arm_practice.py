"""Autonomous practice on the arm tasks (``practice=True``): an episode starts with the arm at home and the cube where
the last one left it (``practice_reset="home"``) or where the scripted reset controller pushed it (``"expert"``, the
default), with a new target; only a scene the arm cannot recover from is reset, counted as a human reset."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from robot_rl.envs.arm import STATE_LAYOUT, ArmEnv, make_expert
from robot_rl.envs.arm.constants import PRACTICE_RESET_TOL, PRACTICE_REST, PRACTICE_XY_BOX

from robot_rl import envs

L = STATE_LAYOUT


def _cube_qpos(env: ArmEnv) -> slice:
    adr = int(env.model.joint("cube").qposadr[0])
    return slice(adr, adr + 3)


def _move_cube(env: ArmEnv, seed: int, **where: float) -> None:
    """After a seeded reset and one step, put the cube's centre coordinates ``x``, ``y`` or ``z`` where given."""
    env.reset(seed=seed)
    env.step(np.zeros(4))
    qpos, qvel = env.physics.state()
    qpos = qpos.clone()
    cube = _cube_qpos(env)
    for axis, value in where.items():
        qpos[0, cube.start + "xyz".index(axis)] = value
    env.physics.set_state(qpos, qvel)


def test_practice_leaves_the_cube_and_sends_the_arm_home_with_a_new_target() -> None:
    env = ArmEnv("push", practice=True, practice_reset="home")
    try:
        obs, info = env.reset(seed=0)
        assert info == {"success": False, "human_reset": False, "reset_steps": 0}
        rng = np.random.default_rng(0)
        for _ in range(20):
            obs, *_ = env.step(rng.uniform(-1, 1, 4))
        cube_qpos = _cube_qpos(env)
        before = env.physics.state()[0].clone()
        old_target = obs[L["target_pos"]].copy()
        home = env.reset_position()  # where the reset will take the hand: a fresh start pose
        obs, info = env.reset()
        assert info == {"success": False, "human_reset": False, "reset_steps": 0}
        after = env.physics.state()[0]
        # the cube was not put back (position and orientation as the last episode left them)
        torch.testing.assert_close(after[:, cube_qpos.start:cube_qpos.start + 7],
                                   before[:, cube_qpos.start:cube_qpos.start + 7], rtol=0, atol=0)
        np.testing.assert_allclose(obs[L["ee_pos"]], home, atol=1e-6)  # the arm went home
        assert np.all(obs[L["ee_pos"]] >= np.array([0.3, -0.12, 0.1]) - 1e-6)
        assert np.all(obs[L["ee_pos"]] <= np.array([0.42, 0.12, 0.2]) + 1e-6)
        assert obs[L["gripper"]][0] > 0.08  # open
        cube, target = obs[L["cube_pos"]], obs[L["target_pos"]]
        assert not np.allclose(target, old_target)
        assert np.linalg.norm(target[:2] - cube[:2]) >= 0.1 - 1e-6  # the task's rule, from where the cube is
        assert (env.practice_resets, env.human_resets) == (1, 0)
        # a reset with no step in between is the task's own reset (nothing ran to go on from)
        env.reset()
        assert not torch.equal(env.physics.state()[0][:, cube_qpos], after[:, cube_qpos])
        assert (env.practice_resets, env.human_resets) == (1, 0)
    finally:
        env.close()


@pytest.mark.parametrize("where", ["beyond the box", "off the table"])
def test_a_stuck_scene_is_reset_and_counted_as_a_human_reset(where: str) -> None:
    env = ArmEnv("push", practice=True, practice_reset="home")
    try:
        _move_cube(env, 1, **({"x": PRACTICE_XY_BOX[1][0] + 0.02} if where == "beyond the box" else {"z": -0.1}))
        obs, info = env.reset()
        assert info["human_reset"] is True
        assert (env.practice_resets, env.human_resets) == (0, 1)
        low, high = (0.28, -0.15), (0.45, 0.15)  # CUBE_XY_BOX: a fresh start
        assert np.all(obs[L["cube_pos"]][:2] >= np.array(low) - 1e-6) and np.all(obs[L["cube_pos"]][:2] <= high)
        env.step(np.zeros(4))
        assert env.reset()[1]["human_reset"] is False and env.human_resets == 1
    finally:
        env.close()


@pytest.mark.parametrize("xy", [(0.17, 0.0), (0.15, -0.25), (0.56, 0.2), (0.4, -0.26)])
def test_the_reset_controller_picks_up_a_cube_it_cannot_push_back(xy: tuple[float, float]) -> None:
    """A cube outside PRACTICE_XY_BOX but within the hand's reach (between the box and the robot's base, or beyond the
    box's far and side edges) is picked up, carried to the start and put down: not a human reset. Before the pick
    fallback each of these was a human reset (the push needs the hand 6 cm behind the cube)."""
    env = ArmEnv("push", practice=True)
    try:
        _move_cube(env, 5, x=xy[0], y=xy[1])
        goal = env.arm_task.start_cube(copy.deepcopy(env._rng))[0].numpy()
        obs, info = env.reset()
        assert info["human_reset"] is False and 0 < info["reset_steps"] < 200
        cube_pos = obs[L["cube_pos"]]
        assert np.linalg.norm(cube_pos[:2] - goal[:2]) < PRACTICE_RESET_TOL
        assert abs(cube_pos[2] - goal[2]) < 0.005  # put down on the table, not held
        assert float(env.arm_task.cube_speed(env.physics.state()[1])[0]) <= PRACTICE_REST
        assert obs[L["gripper"]][0] > 0.08  # the hand let go and went home open
    finally:
        env.close()


def test_practice_has_fences_that_keep_a_pushed_cube_within_the_hands_reach() -> None:
    """A cube sent sliding towards the robot's base (or past the hand's far reach) stops at practice's fence, where the
    reset controller picks it up: not a human reset. Without the fences it slid beyond x 0.13, out of reach: two
    thirds of practice's human resets with an 8k-step RLPD policy."""
    plain = ArmEnv("push")
    assert not [plain.model.geom(i).name for i in range(plain.model.ngeom) if "fence" in plain.model.geom(i).name]
    plain.close()
    env = ArmEnv("push", practice=True)
    try:
        adr, vadr = int(env.model.joint("cube").qposadr[0]), int(env.model.joint("cube").dofadr[0])
        for x, vx in ((0.25, -3.0), (0.5, 1.5)):
            env.reset(seed=2)
            env.step(np.zeros(4))
            qpos, qvel = (t.clone() for t in env.physics.state())
            qpos[0, adr], qpos[0, adr + 1], qvel[0, vadr] = x, 0.0, vx
            env.physics.set_state(qpos, qvel)
            for _ in range(40):
                env.physics.step(env.arm_task.control(torch.zeros(1, 4), *env.physics.state()), env.arm_task.frame_skip)
            cube = env.arm_task.cube_position(env.physics.state()[0])[0].numpy()
            assert 0.15 <= cube[0] <= 0.6 and abs(cube[2] - 0.02) < 0.005  # stopped at a fence, on the table
            goal = env.arm_task.start_cube(copy.deepcopy(env._rng))[0].numpy()
            obs, info = env.reset()
            assert info["human_reset"] is False
            assert np.linalg.norm(obs[L["cube_pos"]][:2] - goal[:2]) < PRACTICE_RESET_TOL
    finally:
        env.close()


def test_the_hand_never_touches_the_fences_anywhere_in_its_workspace() -> None:
    """The fences stand outside everything the hand can reach: driven to the workspace's near and far edges (middle and
    corners), down to its floor with the fingers open, no pad or palm touches a fence (the low ramps may carry a
    pad, as the table does)."""
    env = ArmEnv("push", practice=True)
    try:
        model = env.model
        fences = {i for i in range(model.ngeom) if model.geom(i).name.startswith("fence")}
        hand = {model.geom("pad_l").id, model.geom("pad_r").id, model.geom("palm").id}
        for corner in ((-1.0, 0.0), (-1.0, 1.0), (1.0, 0.0), (1.0, -1.0)):
            env.reset(seed=0)
            for _ in range(60):
                obs, *_ = env.step(np.array([corner[0], corner[1], -1.0, -1.0]))
                data = env.data
                pairs = {frozenset((int(data.contact[i].geom1), int(data.contact[i].geom2))) for i in range(data.ncon)}
                assert not any(pair & fences and pair & hand for pair in pairs), (corner, obs[L["ee_pos"]])
            ee = obs[L["ee_pos"]]
            assert (ee[0] < 0.16 if corner[0] < 0 else ee[0] > 0.55) and ee[2] < 0.04  # there (a pad may stand on a ramp)
    finally:
        env.close()


def test_practice_through_the_batched_env_and_its_refusals() -> None:
    env = envs.make("arm:push", num_envs=2, seed=0, practice=True, practice_reset="home", max_episode_steps=5)
    try:
        env.reset()
        humans = 0
        for _ in range(5):
            obs, _, terminated, truncated, info = env.step(torch.zeros(2, 4))
        done = terminated | truncated
        assert bool(done.all())
        # the next episode starts with the cube where the last one ended, and another target
        final = info["final_obs"]["state"]
        torch.testing.assert_close(obs["state"][:, L["cube_pos"]], final[:, L["cube_pos"]])
        assert not torch.allclose(obs["state"][:, L["target_pos"]], final[:, L["target_pos"]])
        humans += int(info.get("human_reset", torch.zeros(2, dtype=torch.bool)).sum())
        assert humans == 0
    finally:
        env.close()
    with pytest.raises(ValueError, match="only arm: specs practise"):
        envs.make("gym:Pendulum-v1", practice=True)
    with pytest.raises(ValueError, match="practice_reset must be 'expert' or 'home', got 'person'"):
        envs.make("arm:push", practice=True, practice_reset="person")


def test_the_expert_practises_push_with_few_human_resets() -> None:
    """The scripted expert on push, reset-free for 40 episodes: each new target is pushed to from where the cube
    lies, and the scene never needs a person (the targets keep the cube in the middle of the table)."""
    env = envs.make("arm:push", num_envs=4, seed=0, practice=True, practice_reset="home")
    expert = make_expert("arm:push", 4, seed=0)
    try:
        obs = env.reset()
        episodes = successes = humans = 0
        while episodes < 40:
            obs, _, terminated, truncated, info = env.step(expert.act(obs))
            done = terminated | truncated
            expert.reset(done)
            episodes += int(done.sum())
            successes += int(terminated.sum())
            humans += int(info["human_reset"].sum()) if "human_reset" in info else 0
        assert successes / episodes >= 0.9
        assert humans <= 1
    finally:
        env.close()


@pytest.mark.parametrize("task", ["push", "pick_place"])
def test_the_reset_controller_puts_the_cube_back_where_a_full_reset_would(task: str) -> None:
    """practice_reset="expert": after an episode that moved the cube (pushed at random, or carried into the air by the
    expert on pick_place), the reset controller brings it within PRACTICE_RESET_TOL of the start the task's own reset
    would draw, at rest, in simulated control steps that the info reports; the arm then starts at home and nothing
    is a human reset. (The cube was left sliding, up to 3 rad/s, before the settling was added.)"""
    env = ArmEnv(task, practice=True)
    expert = make_expert(f"arm:{task}", 1, seed=0)
    try:
        obs, _ = env.reset(seed=3)
        rng = np.random.default_rng(0)
        total = 0
        for episode in range(4):
            carried = episode % 2 == 1  # the expert's episodes: on pick_place the cube ends in the air
            expert.reset()
            for _ in range(100):
                action = expert.act(torch.as_tensor(obs)[None])[0].numpy() if carried else rng.uniform(-1, 1, 4)
                obs, _, terminated, _, _ = env.step(action)
                if terminated:
                    break
            if carried and task == "pick_place":
                assert obs[L["cube_pos"]][2] > 0.05  # in the hand, above the table
            goal = env.arm_task.start_cube(copy.deepcopy(env._rng))[0].numpy()
            home = env.reset_position()
            obs, info = env.reset()
            assert info["human_reset"] is False and 0 < info["reset_steps"] < 200
            total += info["reset_steps"]
            cube = obs[L["cube_pos"]]
            assert np.linalg.norm(cube[:2] - goal[:2]) < PRACTICE_RESET_TOL
            assert abs(cube[2] - goal[2]) < 0.005  # on the table
            # at rest: an episode that starts with the cube still sliding from the push is not the task's start
            assert float(env.arm_task.cube_speed(env.physics.state()[1])[0]) <= PRACTICE_REST
            np.testing.assert_allclose(obs[L["ee_pos"]], home, atol=1e-6)
            assert np.linalg.norm(obs[L["target_pos"]][:2] - cube[:2]) >= 0.1 - 1e-6
        assert (env.reset_motion_steps, env.human_resets, env.practice_resets) == (total, 0, 4)
    finally:
        env.close()


def test_the_reset_controllers_steps_reach_the_batched_info() -> None:
    env = envs.make("arm:push", num_envs=2, seed=0, practice=True, max_episode_steps=20)
    try:
        env.reset()
        gen = torch.Generator().manual_seed(0)
        for _ in range(20):
            _, _, terminated, truncated, info = env.step(torch.rand(2, 4, generator=gen) * 2 - 1)
        assert bool((terminated | truncated).all())
        steps = info["reset_steps"]
        assert steps.dtype == torch.int64 and steps.shape == (2,) and bool((steps > 0).all())
    finally:
        env.close()


def test_practice_from_cameras_puts_the_cube_back_and_observes_frames() -> None:
    """The reset controller reads the simulator (as a robot's script reads the cube's measured pose); the learner
    still observes proprioception and frames only."""
    env = ArmEnv("push", pixels=True, pixel_size=(32, 32), practice=True)
    try:
        env.reset(seed=2)
        rng = np.random.default_rng(1)
        for _ in range(30):
            env.step(rng.uniform(-1, 1, 4))
        goal = env.arm_task.start_cube(copy.deepcopy(env._rng))[0].numpy()
        obs, info = env.reset()
        assert set(obs) == {"state", "pixels/front", "pixels/wrist"} and obs["state"].shape == (7,)
        assert obs["pixels/front"].shape == (32, 32, 3) and not info["human_reset"]
        cube = env.privileged_state()[L["cube_pos"]]
        assert np.linalg.norm(cube[:2] - goal[:2]) < PRACTICE_RESET_TOL
    finally:
        env.close()
