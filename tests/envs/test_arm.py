"""Tests for the tabletop arm tasks (envs.arm, ``arm:`` specs) and their scripted experts.

The contract tests (test_contract.py) also cover ``arm:reach`` and ``arm:push-sparse``; here: task specifics,
pixels, and expert quality. Batches are small and episodes short so the module runs in well under a minute.
"""

from __future__ import annotations

import warnings

import gymnasium as gym
import mujoco
import numpy as np
import pytest
import torch
from gymnasium.utils.env_checker import check_env
from robot_rl.envs.arm import PROPRIO_DIM, PROPRIO_KEYS, STATE_DIM, STATE_LAYOUT, TIME_LIMITS, ArmEnv
from robot_rl.envs.arm.constants import PROPRIO_INDEX
from robot_rl.envs.arm.experts import ScriptedExpert, make_expert
from robot_rl.envs.sim.tasks.arm import analytic_ik

from robot_rl import envs

L = STATE_LAYOUT


def run_expert(env: envs.BatchedEnv, expert: ScriptedExpert, episodes_per_env: int) -> list[bool]:
    """Roll the expert until every env finished ``episodes_per_env`` episodes; returns their success flags."""
    obs = env.reset()
    finished = torch.zeros(env.num_envs, dtype=torch.long)
    results: list[bool] = []
    for _ in range(episodes_per_env * (env.max_episode_steps or 1000) + 1):
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        done = terminated | truncated
        expert.reset(done)
        for i in torch.nonzero(done).flatten().tolist():
            if finished[i] < episodes_per_env:
                results.append(bool(terminated[i]))
            finished[i] += 1
        if bool((finished >= episodes_per_env).all()):
            break
    return results


def test_layout_covers_state_once() -> None:
    covered = sorted(i for s in L.values() for i in range(STATE_DIM)[s])
    assert covered == list(range(STATE_DIM))


@pytest.mark.parametrize("task", ["reach", "push", "pick_place", "track"])
def test_spaces_limits_and_layout(make, task: str) -> None:
    env = make(f"arm:{task}", num_envs=2, seed=0)
    assert env.observation_spec == {"state": ((STATE_DIM,), torch.float32)}
    assert env.action_dim == 4
    assert env.max_episode_steps == TIME_LIMITS[task]
    obs = env.reset()
    for _ in range(3):
        obs, reward, terminated, truncated, info = env.step(torch.rand(2, 4) * 2 - 1)
    s = obs["state"]
    torch.testing.assert_close(s[:, L["cube_rel_ee"]], s[:, L["cube_pos"]] - s[:, L["ee_pos"]])
    torch.testing.assert_close(s[:, L["target_rel_cube"]], s[:, L["target_pos"]] - s[:, L["cube_pos"]])
    torch.testing.assert_close(s[:, L["target_rel_ee"]], s[:, L["target_pos"]] - s[:, L["ee_pos"]])
    assert torch.all(reward <= 0)  # dense rewards are negative distances
    assert info["success"].dtype == torch.bool
    half = envs.make(f"arm:{task}", num_envs=1, action_repeat=2)
    assert half.max_episode_steps == TIME_LIMITS[task] // 2
    half.close()


def test_analytic_ik_matches_the_model() -> None:
    env = ArmEnv("reach")
    data = mujoco.MjData(env.model)
    grip = env.model.site("grip").id
    for point in ([0.3, 0.0, 0.1], [0.5, -0.2, 0.03], [0.2, 0.25, 0.3]):
        data.qpos[:5] = analytic_ik(torch.tensor(point, dtype=torch.float64)).numpy()
        mujoco.mj_kinematics(env.model, data)
        np.testing.assert_allclose(data.site_xpos[grip], point, atol=1e-9)
        np.testing.assert_allclose(data.site_xmat[grip].reshape(3, 3), np.diag([-1.0, 1.0, -1.0]), atol=1e-9)
    env.close()


def test_sparse_reward_is_success_and_success_terminates(make) -> None:
    env = make("arm:reach-sparse", num_envs=4, seed=1)
    expert = make_expert("arm:reach-sparse", 4, seed=0)
    obs = env.reset()
    successes = 0
    for _ in range(30):
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        expert.reset(terminated | truncated)
        assert torch.equal(reward, info["success"].float())
        assert torch.equal(terminated, info["success"])
        successes += int(terminated.sum())
        # the first observation of the next episode is not a success
        final = info["final_obs"]["state"][terminated]
        assert torch.all(final[:, L["target_rel_ee"]].norm(dim=1) < 0.03)
    assert successes >= 8


def test_end_on_success_false_goes_on_past_the_success(make) -> None:
    """`end_on_success=False` (training on a learned reward): the expert's successes are still reported and
    rewarded, but no episode ends there; the time limit ends them all. Other backends refuse the option."""
    env = make("arm:reach-sparse", num_envs=4, seed=1, end_on_success=False)
    expert = make_expert("arm:reach-sparse", 4, seed=0)
    obs, solved_steps = env.reset(), 0
    for step in range(env.max_episode_steps):
        obs, reward, terminated, truncated, info = env.step(expert.act(obs))
        assert torch.equal(reward, info["success"].float()) and not bool(terminated.any())
        assert bool(truncated.all()) == (step == env.max_episode_steps - 1)
        solved_steps += int(info["success"].sum())
    assert solved_steps >= 40  # the expert reaches within ~15 steps and holds the target
    with pytest.raises(ValueError, match="end_on_success=False: only arm: specs"):
        envs.make("gym:Pendulum-v1", end_on_success=False)


def test_dense_and_sparse_share_dynamics(make) -> None:
    dense, sparse = (
        make("arm:pick_place", num_envs=2, seed=4),
        make("arm:pick_place-sparse", num_envs=2, seed=4),
    )
    obs_d, obs_s = dense.reset(), sparse.reset()
    assert torch.equal(obs_d["state"], obs_s["state"])
    for action in torch.rand(5, 2, 4) * 2 - 1:
        obs_d, r_d, *_ = dense.step(action)
        obs_s, r_s, *_ = sparse.step(action)
        assert torch.equal(obs_d["state"], obs_s["state"])
        assert torch.all(r_d < 0) and torch.all(r_s == 0)


def test_seeded_runs_are_identical(make) -> None:
    a, b = make("arm:pick_place", num_envs=2, seed=3), make("arm:pick_place", num_envs=2, seed=3)
    ea, eb = (
        make_expert("arm:pick_place", 2, noise=0.5, seed=1),
        make_expert("arm:pick_place", 2, noise=0.5, seed=1),
    )
    obs_a, obs_b = a.reset(), b.reset()
    for _ in range(20):
        act_a, act_b = ea.act(obs_a), eb.act(obs_b)
        assert torch.equal(act_a, act_b)
        obs_a, rew_a, *_ = a.step(act_a)
        obs_b, rew_b, *_ = b.step(act_b)
        assert torch.equal(obs_a["state"], obs_b["state"]) and torch.equal(rew_a, rew_b)
    other = make("arm:pick_place", num_envs=2, seed=4).reset()
    assert not torch.equal(other["state"], a.reset(seed=3)["state"][[1, 0]])


def test_make_single_passes_env_checker() -> None:
    env = envs.make_single("arm:pick_place-sparse", seed=0)
    assert env.observation_space == gym.spaces.Box(-np.inf, np.inf, (STATE_DIM,), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    env.close()


def test_pixels(make) -> None:
    """A -pixels spec observes proprioception and the front and wrist cameras (the groups CameraFusion reads)."""
    env = make("arm:push-sparse-pixels", num_envs=2, seed=0, max_episode_steps=2)
    assert env.observation_spec == {
        "state": ((PROPRIO_DIM,), torch.float32),
        "pixels/front": ((84, 84, 3), torch.uint8),
        "pixels/wrist": ((84, 84, 3), torch.uint8),
    }
    obs = env.reset()
    for group in ("pixels/front", "pixels/wrist"):
        assert obs[group].shape == (2, 84, 84, 3) and obs[group].dtype == torch.uint8
        assert obs[group].float().std() > 10  # a real image, not a blank frame
    assert not torch.equal(obs["pixels/front"], obs["pixels/wrist"])
    env.step(torch.zeros(2, 4))
    obs, _, _, truncated, info = env.step(torch.ones(2, 4))
    assert truncated.all()
    assert set(info["final_obs"]) == {"state", "pixels/front", "pixels/wrist"}
    assert info["final_obs"]["pixels/wrist"].shape == (2, 84, 84, 3)
    # the last frame of the ended episode, not the first of the new one
    assert not torch.equal(info["final_obs"]["pixels/wrist"], obs["pixels/wrist"])

    assert make("arm:reach-pixels", num_envs=1, seed=0, render_size=(48, 64)).reset()["pixels/front"].shape == (
        1, 48, 64, 3)
    sized = make("arm:reach-pixels", num_envs=1, seed=0, render=True, pixel_size=(32, 40), render_size=(60, 80))
    assert sized.reset()["pixels/wrist"].shape == (1, 32, 40, 3) and sized.render(0).shape == (60, 80, 3)
    single = envs.make_single("arm:reach-pixels", seed=0)
    assert isinstance(single.observation_space, gym.spaces.Dict)
    first, _ = single.reset()
    assert single.observation_space.contains(first)
    single.close()
    with pytest.raises(ValueError, match="pixel_size"):
        envs.make("arm:reach-pixels", pixel_size=(84,))


def test_pixel_state_is_proprioception_only() -> None:
    """Moving the cube and the target changes the state task's observation and the front image, never the pixel
    task's state: nothing but the cameras tells a pixel learner where they are."""
    full, pix = ArmEnv("push"), ArmEnv("push", pixels=True)
    try:
        state0, _ = full.reset(seed=3)
        obs0, _ = pix.reset(seed=3)
        assert np.array_equal(obs0["state"], state0[list(PROPRIO_INDEX)])
        assert [k for k in PROPRIO_KEYS] == ["ee_pos", "ee_vel", "gripper"]
        for env in (full, pix):
            qpos, qvel = env.physics.state()
            qpos = qpos.clone()
            cube = env.arm_task._cube_pos
            qpos[:, cube.start:cube.start + 2] += 0.05  # the cube slides 5 cm
            env.arm_task.target = env.arm_task.target + 0.04  # and the target moves
            moved = env._observation(qpos, qvel)
            if env is full:
                assert not np.array_equal(moved, state0)
                assert np.array_equal(moved[L["ee_pos"]], state0[L["ee_pos"]])
            else:
                assert np.array_equal(moved["state"], obs0["state"])
                assert not np.array_equal(moved["pixels/front"], obs0["pixels/front"])
    finally:
        full.close()
        pix.close()


def test_wrist_camera_moves_with_the_hand() -> None:
    env = ArmEnv("reach", pixels=True)
    try:
        env.reset(seed=0)
        for _ in range(15):  # let the servos settle on the start pose
            env.step(np.zeros(4))
        still, _, _, _, _ = env.step(np.zeros(4))
        again, _, _, _, _ = env.step(np.zeros(4))
        front, wrist = mujoco.mj_name2id(env.model, mujoco.mjtObj.mjOBJ_CAMERA, "front"), mujoco.mj_name2id(
            env.model, mujoco.mjtObj.mjOBJ_CAMERA, "wrist")
        cams = env.data.cam_xpos.copy()
        assert np.array_equal(again["pixels/front"], still["pixels/front"])  # a static scene: the same picture
        for _ in range(3):
            moved, _, _, _, _ = env.step(np.array([1.0, 0.0, 0.0, 0.0]))
        assert np.array_equal(env.data.cam_xpos[front], cams[front])  # fixed camera
        assert np.linalg.norm(env.data.cam_xpos[wrist] - cams[wrist]) > 0.02  # rides on the hand
        changed = (moved["pixels/wrist"] != again["pixels/wrist"]).any(-1).mean()
        assert changed > 0.2, changed
    finally:
        env.close()


def test_no_expert_for_pixel_specs_from_the_observation() -> None:
    with pytest.raises(ValueError, match="no scripted expert for 'arm:push-pixels' from its observation: .*"
                                         "pass privileged=True and act on env.privileged_state"):
        make_expert("arm:push-pixels", 1)
    assert make_expert("arm:push-pixels", 1, privileged=True).task == "push"


def test_privileged_state_is_the_hidden_full_state(make) -> None:
    """A -pixels env's observation carries proprioception only; `privileged_state()` is the full state behind it
    (the state env's observation, bit for bit), rows following autoresets; envs without one say so in one line."""
    pix = make("arm:push-pixels", num_envs=2, seed=3, max_episode_steps=2, pixel_size=(16, 16))
    full = make("arm:push", num_envs=2, seed=3, max_episode_steps=2)
    with pytest.raises(RuntimeError, match="call reset"):
        pix.privileged_state()
    obs, state_obs = pix.reset(), full.reset()
    for _ in range(3):  # across an autoreset (time limit 2)
        hidden = pix.privileged_state()
        assert hidden.shape == (2, STATE_DIM) and hidden.dtype == torch.float32
        assert torch.equal(hidden, state_obs["state"])
        assert set(obs) == {"state", "pixels/front", "pixels/wrist"} and obs["state"].shape == (2, PROPRIO_DIM)
        assert torch.equal(obs["state"], hidden[:, list(PROPRIO_INDEX)])
        action = torch.full((2, 4), 0.5)
        obs, *_ = pix.step(action)
        state_obs, *_ = full.step(action)
    with pytest.raises(NotImplementedError, match=r"^gym:Pendulum-v1: this env exposes no privileged state"):
        make("gym:Pendulum-v1", num_envs=1).privileged_state()


def test_privileged_expert_in_a_pixel_task_acts_as_in_the_state_task(make) -> None:
    """Same seed, same starts: the privileged expert in push-sparse-pixels takes the state expert's actions and
    succeeds as often (rendering changes nothing in the simulation)."""
    pix = make("arm:push-sparse-pixels", num_envs=2, seed=7, pixel_size=(16, 16))
    full = make("arm:push-sparse", num_envs=2, seed=7)
    results = []
    for env, privileged in ((full, False), (pix, True)):
        expert = make_expert(env.spec, 2, seed=0, privileged=privileged)
        obs, actions, successes, finished = env.reset(), [], [], 0
        while finished < 4:
            action = expert.act(env.privileged_state() if privileged else obs)
            obs, _, terminated, truncated, info = env.step(action)
            actions.append(action)
            done = terminated | truncated
            expert.reset(done)
            successes += info["success"][done].tolist()
            finished += int(done.sum())
        results.append((torch.stack(actions), successes))
    (state_actions, state_ok), (pixel_actions, pixel_ok) = results
    assert torch.equal(state_actions, pixel_actions) and pixel_ok == state_ok
    assert sum(pixel_ok) == len(pixel_ok) >= 4


def test_render_frames(make) -> None:
    env = make("arm:pick_place", num_envs=2, seed=0, render=True, render_size=(60, 80), camera_id=1)
    env.reset()
    frame = env.render(1)
    assert frame.shape == (60, 80, 3) and frame.dtype == np.uint8 and frame.std() > 10


@pytest.mark.parametrize("spec", ["arm:lift", "arm:push-dense", "arm:push-pixels-sparse", "arm:reach-"])
def test_unknown_spec(spec: str) -> None:
    with pytest.raises(envs.UnknownEnvError, match="arm:pick_place-sparse-pixels"):
        envs.make(spec)
    with pytest.raises(ValueError):
        make_expert("gym:Hopper-v5", 1)


@pytest.mark.parametrize("task", ["reach", "push", "pick_place", "track"])
def test_expert_succeeds(make, task: str) -> None:
    env = make(f"arm:{task}-sparse", num_envs=10, seed=123)
    results = run_expert(env, ScriptedExpert(task, 10, seed=0), episodes_per_env=3)
    assert len(results) == 30
    assert sum(results) / len(results) >= 0.95


def test_track_is_where_latency_matters(make) -> None:
    """The track expert acts on where the target is now: under a 5-step (250 ms) delay it no longer catches the
    target, while reach's expert still succeeds sometimes (what ``bench/results/delay_arm`` trains against)."""
    from robot_rl.envs.delay import ActionDelay

    results = {}
    for task in ("track", "reach"):
        env = make(f"arm:{task}-sparse", num_envs=10, seed=3, delay=ActionDelay(steps=5))
        results[task] = run_expert(env, ScriptedExpert(task, 10, seed=0), episodes_per_env=1)
    assert sum(results["track"]) == 0
    assert sum(results["reach"]) >= 1


def test_noisy_expert_is_worse(make) -> None:
    env = make("arm:pick_place", num_envs=10, seed=5)
    results = run_expert(env, make_expert("arm:pick_place", 10, noise=1.0, seed=0), episodes_per_env=1)
    assert sum(results) / len(results) <= 0.6


def test_the_arm_tasks_are_registered_with_gymnasium() -> None:
    """`gymnasium.make("robot_rl/ArmPush-v0")` after `import robot_rl.envs`: the arm: spec's env, time limit included."""
    import gymnasium
    import robot_rl.envs  # noqa: F401  (registers the ids)
    from robot_rl.envs.arm_backend import gym_ids

    assert len(gym_ids()) == 16 and gym_ids()["robot_rl/ArmPickPlaceSparsePixels-v0"] == "arm:pick_place-sparse-pixels"
    env = gymnasium.make("robot_rl/ArmReachSparse-v0", render_mode="rgb_array", render_size=(48, 64))
    obs, _ = env.reset(seed=0)
    assert obs.shape == (29,) and env.action_space.shape == (4,)
    assert env.render().shape == (48, 64, 3)
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated) and steps < 60:
        *_, terminated, truncated, _ = env.step(np.zeros(4, np.float32))
        steps += 1
    assert truncated and steps == 50  # reach's 50-step limit; standing still never succeeds
    env.close()


def test_reflection_of_the_arm_specs() -> None:
    """``BatchedEnv.reflection`` through the gymnasium backend: push and pick_place declare y -> -y (the dynamics
    and the flipped frames are checked in ``tests/envs/sim/test_arm_task.py``), in their -pixels variants with the
    proprioception's signs and both cameras; reach and a task without the method declare none."""
    for spec, expected in [("arm:push-sparse", True), ("arm:pick_place", True), ("arm:reach", False),
                           ("arm:push-pixels", True), ("arm:reach-pixels", False), ("gym:Pendulum-v1", False)]:
        env = envs.make(spec, num_envs=1, **({"pixel_size": (16, 16)} if "pixels" in spec else {}))
        try:
            reflection = env.reflection()
            assert (reflection is not None) == expected, spec
            if reflection is not None:
                pixels = "pixels" in spec
                assert reflection.state.shape == (PROPRIO_DIM if pixels else STATE_DIM,)
                assert reflection.action.tolist() == [1, -1, 1, 1]
                assert set(reflection.state.tolist()) == {1.0, -1.0}
                assert reflection.state[STATE_LAYOUT["gripper"]].item() == 1.0
                assert reflection.cameras == (("pixels/front", "pixels/wrist") if pixels else ())
                if pixels:  # the proprioception's signs are those of its entries in the full state
                    full = ArmEnv("push").reflection()[0]
                    assert reflection.state.tolist() == full[list(PROPRIO_INDEX)].tolist()
        finally:
            env.close()

