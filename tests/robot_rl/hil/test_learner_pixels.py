"""The HIL learner from camera frames: chunk validation of the frame keys, a DrQ pixel agent over frame buffers
(each frame stored once, gaps closed as truncations), its checkpoint round trip, the acting weights (actor +
encoder) an actor process loads, and pixel demos in the prior buffer. Tiny frames and networks: a few seconds."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest
import torch

from robot_rl.agents.sac import EncoderConfig, NetworkConfig, OptimiserConfig, SACConfig, policy_state_dict
from robot_rl.hil.learner import (
    HILLearner,
    LearnerConfig,
    LocalLink,
    agent_weights,
    build_policy,
    check_transitions,
    frame_keys,
    load_acting_weights,
)

OBS, ACT, H, W = 3, 2, 16, 16
CAMERAS = {"pixels/front": [H, W, 3], "pixels/wrist": [H, W, 3]}


pytestmark = pytest.mark.usefixtures("one_thread")


def config(**kw) -> LearnerConfig:
    sac = kw.pop("sac", SACConfig(network=NetworkConfig(hidden_dims=[16]),
                                  encoder=EncoderConfig(feature_dim=8, channels=4, layers=1),
                                  optimiser=OptimiserConfig(batch_size=8)))
    base = {"obs_dim": OBS, "action_dim": ACT, "capacity": 200, "prior_capacity": 100, "learning_starts": 4,
            "cameras": CAMERAS}
    return LearnerConfig(sac=sac, **{**base, **kw})


def frame(step: int, group: str) -> np.ndarray:
    """The frame of global step `step`: its index in every pixel (plus 100 for the wrist camera), traceable."""
    return np.full((H, W, 3), (step + (100 if group.endswith("wrist") else 0)) % 256, np.uint8)


def state(steps: np.ndarray) -> np.ndarray:
    """The state of global steps: [step, sin(step), cos(step)]."""
    return np.stack([steps, np.sin(steps), np.cos(steps)], 1).astype(np.float32)


def chunk(n: int, start: int = 0, intervention=None, terminated_last: bool = False) -> dict[str, np.ndarray]:
    """n consecutive steps from global step `start`: state[:, 0] and every frame pixel hold the step index."""
    rng = np.random.default_rng(start)
    steps = np.arange(start, start + n)
    obs, nxt = state(steps), state(steps + 1)  # consecutive chunks: each obs is the previous next_obs
    c = {
        "obs": obs,
        "action": rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": nxt,
        "terminated": np.arange(n) == n - 1 if terminated_last else np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "intervention": np.zeros(n, bool) if intervention is None else np.asarray(intervention, bool),
    }
    for group in CAMERAS:
        key, next_key = frame_keys(group)
        c[key] = np.stack([frame(int(s), group) for s in steps])
        c[next_key] = np.stack([frame(int(s) + 1, group) for s in steps])
    return c


# ------------------------------------------------------------------------------------------------ validation


def test_a_good_pixel_chunk_passes_with_and_without_the_learners_cameras() -> None:
    assert check_transitions(chunk(5), OBS, ACT, CAMERAS) == 5
    assert check_transitions(chunk(5)) == 5  # the actor's structure check: any camera pairs


def _dtype(c):
    c["obs/pixels/front"] = c["obs/pixels/front"].astype(np.float32)


def _size(c):
    c["next_obs/pixels/wrist"] = np.zeros((5, H, W + 2, 3), np.uint8)


def _missing_next(c):
    del c["next_obs/pixels/front"]


def _unknown_camera(c):
    c["obs/pixels/side"] = c["obs/pixels/front"]
    c["next_obs/pixels/side"] = c["next_obs/pixels/front"]


def _channels(c):
    c["obs/pixels/wrist"] = c["obs/pixels/wrist"][..., :1]


def _length(c):
    c["obs/pixels/front"] = c["obs/pixels/front"][:3]


def _typo(c):
    c["obs/pixel/front"] = c.pop("obs/pixels/front")


@pytest.mark.parametrize(
    ("corrupt", "key"),
    [
        (_dtype, "obs/pixels/front"),
        (_size, "next_obs/pixels/wrist"),
        (_missing_next, "next_obs/pixels/front"),
        (_unknown_camera, "obs/pixels/side"),
        (_channels, "obs/pixels/wrist"),
        (_length, "obs/pixels/front"),
        (_typo, "obs/pixel/front"),
    ],
)
def test_add_rejects_a_bad_pixel_chunk_naming_the_key(corrupt, key: str) -> None:
    learner = HILLearner(config())
    c = chunk(5)
    corrupt(c)
    with pytest.raises(ValueError, match=f"'{key}'") as e:
        learner.add(c)
    assert len(str(e.value).splitlines()) == 1
    assert len(learner.online) == len(learner.prior) == learner.transitions == 0


def test_missing_cameras_and_frames_for_a_state_learner_are_refused() -> None:
    c = chunk(4)
    for key in frame_keys("pixels/wrist"):
        del c[key]
    with pytest.raises(ValueError, match="missing key 'obs/pixels/wrist'"):
        HILLearner(config()).add(c)
    with pytest.raises(ValueError, match="unknown key 'obs/pixels/front'.*reads no cameras"):
        check_transitions(chunk(4), OBS, ACT, {})  # a state learner takes no frames
    half = chunk(4)
    del half["obs/pixels/wrist"]
    with pytest.raises(ValueError, match="'obs/pixels/wrist'"):
        check_transitions(half)  # even the structure check wants both frames of a camera


def test_config_validation_names_a_bad_camera() -> None:
    with pytest.raises(ValueError, match="LearnerConfig.cameras: 'front'"):
        HILLearner(config(cameras={"front": [H, W, 3]}))
    with pytest.raises(ValueError, match="LearnerConfig.cameras: 'pixels/front'"):
        HILLearner(config(cameras={"pixels/front": [H, W]}))


# ------------------------------------------------------------------------------------------------ buffers


def test_frames_are_stored_once_and_consecutive_one_step_chunks_stay_one_episode() -> None:
    learner = HILLearner(config())
    assert learner.online.frames == tuple(CAMERAS) and set(learner.online.next_obs) == {"state"}
    for s in range(6):  # what Session sends: one transition per chunk
        learner.add(chunk(1, start=s))
    assert len(learner.online) == 6 and not learner.online.truncated[:6].any()  # no cut at chunk ends
    batch = learner.online.sample(64)
    step = batch.obs["state"][:, 0].long()
    for group in CAMERAS:
        offset = 100 if group.endswith("wrist") else 0
        assert (batch.obs[group][:, 0, 0, 0].long() == step + offset).all()
        assert (batch.next_obs[group][:, 0, 0, 0].long() == step + 1 + offset).all()  # from the following row


def test_a_gap_between_chunks_is_closed_as_a_truncation_keeping_the_true_next_frame() -> None:
    learner = HILLearner(config())
    learner.add(chunk(3, start=0))
    learner.add(chunk(3, start=50))  # not step 3: a gap (a dropped chunk)
    assert learner.online.truncated[:6, 0].tolist() == [False, False, True, False, False, False]
    rows = torch.arange(6)
    batch = learner.online._gather(rows, torch.zeros(6, dtype=torch.long))
    assert batch.next_obs["pixels/front"][:, 0, 0, 0].tolist() == [1, 2, 3, 51, 52, 53]
    assert batch.next_obs["state"][:, 0].tolist() == [1, 2, 3, 51, 52, 53]


def test_intervention_runs_go_to_the_prior_buffer_with_their_own_next_frames() -> None:
    learner = HILLearner(config())
    learner.add(chunk(10, intervention=[0, 1, 1, 0, 0, 1, 1, 1, 0, 0], terminated_last=True))
    assert (len(learner.online), len(learner.prior), learner.interventions) == (10, 5, 5)
    batch = learner.prior._gather(torch.arange(5), torch.zeros(5, dtype=torch.long))
    assert batch.obs["state"][:, 0].tolist() == [1, 2, 5, 6, 7]
    assert batch.next_obs["pixels/wrist"][:, 0, 0, 0].tolist() == [102, 103, 106, 107, 108]
    assert learner.prior.truncated[:5, 0].tolist() == [False, True, False, False, False]  # the first run, closed


MIRROR = {"mirror_state_sign": [1.0, -1.0, -1.0], "mirror_action_sign": [-1.0, 1.0]}  # column 0: the step index


def lopsided(c: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The chunk with a white left half in every frame, so that a left-right flip shows."""
    for group in CAMERAS:
        for key in frame_keys(group):
            c[key][:, :, : W // 2] = 255
    return c


def test_mirror_online_stores_each_run_then_its_reflection_with_every_frame_flipped() -> None:
    learner = HILLearner(config(mirror_online=True, mirror_cameras=list(CAMERAS), **MIRROR))
    c = lopsided(chunk(3, start=0, intervention=[0, 1, 0]))
    learner.add(c)
    learner.add(lopsided(chunk(2, start=3)))
    state_sign, action_sign = (torch.tensor(MIRROR[k]) for k in ("mirror_state_sign", "mirror_action_sign"))
    # online: the run, its reflection (a run of its own: cut apart from both neighbours), the next run, its reflection
    assert learner.online.obs["state"][:10, 0, 0].tolist() == [0, 1, 2] * 2 + [3, 4] * 2
    assert learner.online.truncated[:9, 0].tolist() == [False, False, True] * 2 + [False, True, False]
    batch = learner.online._gather(torch.arange(6), torch.zeros(6, dtype=torch.long))
    torch.testing.assert_close(batch.obs["state"][3:], torch.from_numpy(c["obs"]) * state_sign)
    torch.testing.assert_close(batch.action[3:], torch.from_numpy(c["action"]) * action_sign)
    for group in CAMERAS:
        key, next_key = frame_keys(group)
        assert (batch.obs[group][:3] == torch.from_numpy(c[key])).all()
        assert (batch.obs[group][3:] == torch.from_numpy(c[key]).flip(-2)).all()
        assert (batch.obs[group][3:, :, : W // 2] < 255).all()  # the white half is now on the right
        assert (batch.next_obs[group][3:] == torch.from_numpy(c[next_key]).flip(-2)).all()
    # the intervention and its reflection in the prior buffer, each with its own (flipped) next frame
    prior = learner.prior._gather(torch.arange(2), torch.zeros(2, dtype=torch.long))
    assert (prior.next_obs["pixels/wrist"][1] == torch.from_numpy(c["next_obs/pixels/wrist"][1]).flip(-2)).all()
    assert (learner.transitions, learner.interventions) == (5, 1)


def test_a_camera_learner_mirrors_only_cameras_the_robot_declares_mirrored() -> None:
    with pytest.raises(ValueError, match="no mirror image for camera pixels/front .mirror_cameras: none.: set both"):
        HILLearner(config(mirror_demos=True, **MIRROR))
    with pytest.raises(ValueError, match="no mirror image for camera pixels/wrist .mirror_cameras: pixels/front"):
        HILLearner(config(mirror_online=True, mirror_cameras=["pixels/front"], **MIRROR))
    with pytest.raises(ValueError, match="mirror_cameras needs mirror_state_sign"):
        HILLearner(config(mirror_cameras=list(CAMERAS)))
    HILLearner(config(mirror_online=True, mirror_cameras=["pixels/front"], cameras={"pixels/front": [H, W, 3]},
                      **MIRROR))  # reads only a mirrored camera


# ------------------------------------------------------------------------------------------------ training


def test_trains_a_few_updates_and_the_acting_policy_matches_the_agent() -> None:
    learner = HILLearner(config(utd=1.0))
    learner.add(chunk(12, intervention=np.arange(12) % 3 == 0))
    metrics = learner.train_due()
    assert learner.updates == 8 and learner.version == 1  # utd 1 after learning_starts=4
    assert np.isfinite(metrics["critic_loss"])

    policy = build_policy(learner.cfg)
    policy.load_state_dict(learner.actor_state())  # actor + encoder (+ state statistics): what the robot runs
    assert set(policy.cameras) == set(CAMERAS)
    c = chunk(3, start=7)
    obs = {"state": torch.as_tensor(c["obs"]), **{g: torch.as_tensor(c[frame_keys(g)[0]]) for g in CAMERAS}}
    torch.testing.assert_close(policy.act(obs, deterministic=True), learner.agent.act(obs, deterministic=True))
    # the same weights in a checkpoint's agent layout (a Ray learner's run) give the same policy back
    assert policy_state_dict(agent_weights(learner.cfg, learner.actor_state())).keys() == learner.actor_state().keys()


def test_state_dict_round_trip_restores_frames_weights_counters_and_sampling() -> None:
    a = HILLearner(config())
    a.add(chunk(10, intervention=np.arange(10) % 4 == 0))
    a.add(chunk(5, start=40, terminated_last=True))
    a.train(3)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)
    b = HILLearner(config(seed=1))
    b.load_state_dict(torch.load(buf, weights_only=True))
    assert {k: v for k, v in a.counters().items() if k != "version"} == \
        {k: v for k, v in b.counters().items() if k != "version"}
    for group in CAMERAS:
        assert torch.equal(a.online.obs[group], b.online.obs[group])
        assert torch.equal(a.prior.final_frames[group], b.prior.final_frames[group])
    for k, v in a.actor_state().items():
        torch.testing.assert_close(b.actor_state()[k], v)
    sa, sb = a.sample(), b.sample()
    for group in CAMERAS:
        assert torch.equal(sa.obs[group], sb.obs[group]) and torch.equal(sa.next_obs[group], sb.next_obs[group])
    with pytest.raises((KeyError, RuntimeError, ValueError)):
        HILLearner(config(cameras={})).load_state_dict(a.state_dict())  # a state learner cannot take it


def test_pixel_demos_prefill_the_prior_buffer_and_export_reads_the_learner(tmp_path) -> None:
    """A camera dataset from `robot-rl collect` (push, 32x32 frames) fills a camera learner's prior buffer; the
    learner's checkpoint exports (and so deploys) as an actor + encoder policy at its cameras' sizes."""
    from robot_rl.envs.arm import PROPRIO_DIM, ArmEnv

    from robot_rl.collect import CollectArgs, CollectEnvArgs, collect
    from robot_rl.export import policy_from_checkpoint

    out = tmp_path / "demos"
    collect(CollectArgs(env=CollectEnvArgs(spec="arm:push-sparse-pixels", num_envs=1, max_episode_steps=8,
                                           pixel_size=[32, 32]), out=str(out), episodes=2, policy="expert", seed=0),
            message=lambda m: None)
    cameras = {"pixels/front": [32, 32, 3], "pixels/wrist": [32, 32, 3]}
    learner = HILLearner(config(obs_dim=PROPRIO_DIM, action_dim=4, cameras=cameras, demo_path=str(out),
                                prior_capacity=50))
    assert learner.demo_transitions == len(learner.prior) == 14  # two truncated 8-step episodes, last steps dropped
    assert learner.prior.obs["pixels/front"][:14].float().std() > 0  # real frames, not zeros
    with pytest.raises(ValueError, match="pixels/side"):
        HILLearner(config(obs_dim=PROPRIO_DIM, action_dim=4, cameras={"pixels/side": [32, 32, 3]},
                          demo_path=str(out)))
    # with mirror_demos (the signs and mirrored cameras sim_arm declares for push) the reflections follow, flipped
    env = ArmEnv("push", pixels=True, pixel_size=(32, 32))
    state_sign, action_sign, mirrored = env.reflection()
    env.close()
    both = HILLearner(config(obs_dim=PROPRIO_DIM, action_dim=4, cameras=cameras, demo_path=str(out),
                             prior_capacity=50, mirror_demos=True, mirror_state_sign=state_sign.tolist(),
                             mirror_action_sign=action_sign.tolist(), mirror_cameras=list(mirrored)))
    assert both.demo_transitions == 28
    for group in cameras:
        assert (both.prior.obs[group][14:28] == learner.prior.obs[group][:14].flip(-2)).all()
    torch.testing.assert_close(both.prior.action[14:28], learner.prior.action[:14] * torch.from_numpy(action_sign))

    state = learner.state_dict()
    policy, meta = policy_from_checkpoint(tmp_path / "learner.pt", {"learner": state})
    assert meta["kind"] == "sac" and policy.cameras == cameras
    obs = {"state": torch.zeros(1, PROPRIO_DIM), **{g: torch.zeros(1, 32, 32, 3, dtype=torch.uint8) for g in cameras}}
    torch.testing.assert_close(policy.act(obs, deterministic=True), learner.agent.act(obs, deterministic=True))


def test_a_frozen_backbone_with_cached_embeddings_stores_features_and_acts_on_frames(tmp_path) -> None:
    """`agent.encoder.kind=pretrained agent.encoder.cache_embeddings=true` in hil-train: both buffers hold the backbone's float16
    features (the continuity of one-step chunks still holds on them), updates run, and the robot's policy takes
    raw frames."""
    from robot_rl.policies.encoders import ResNetBackbone

    torch.manual_seed(0)
    weights = tmp_path / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    sac = SACConfig(network=NetworkConfig(hidden_dims=[16]),
                    encoder=EncoderConfig(kind="pretrained", weights=str(weights), feature_dim=8, spatial_features=2, image_shift=0, cache_embeddings=True),
                    optimiser=OptimiserConfig(batch_size=8))
    learner = HILLearner(config(sac=sac, utd=1.0))
    assert learner.online.obs_spec["pixels/front"] == ((512, 1, 1), torch.float16)
    frames_in = []  # the shared backbone's batches
    next(iter(learner.agent.encoder.encoders.values())).backbone.register_forward_hook(
        lambda _, args, __: frames_in.append(args[0].shape[0]))
    for s in range(6):
        learner.add(chunk(1, start=s, intervention=[s % 2 == 0]))
    assert len(learner.online) == 6 and not learner.online.truncated[:6].any()
    # the 7 frames of six consecutive steps, each through the backbone once per camera: not again for the prior
    # buffer's copy of an intervention, nor for a step's frames that were the previous step's next ones
    assert sum(frames_in) == len(CAMERAS) * 7
    assert np.isfinite(learner.train_due()["critic_loss"]) and learner.updates == 2
    policy = build_policy(learner.cfg)
    policy.load_state_dict(learner.actor_state())
    c = chunk(2, start=3)
    obs = {"state": torch.as_tensor(c["obs"]), **{g: torch.as_tensor(c[frame_keys(g)[0]]) for g in CAMERAS}}
    torch.testing.assert_close(policy.act(obs, deterministic=True), learner.agent.act(obs, deterministic=True))


def test_the_links_send_a_frozen_backbone_only_to_an_actor_without_weights(tmp_path) -> None:
    """A pretrained encoder's backbone never trains, yet every weight sync shipped it (ResNet-10 under two cameras:
    39 of 42 MB, ~40 ms a sync in the control loop). Now the first weights an actor gets (in process, and from the
    Ray learner for a new or relinked actor) carry it and later ones do not; the actor acts as the learner either
    way, and anything but the backbone missing is still an error."""
    from robot_rl.policies.encoders import ResNetBackbone

    from robot_rl.hil.distributed import LearnerActor

    torch.manual_seed(0)
    weights = tmp_path / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    sac = SACConfig(network=NetworkConfig(hidden_dims=[16]),
                    encoder=EncoderConfig(kind="pretrained", weights=str(weights), feature_dim=8, spatial_features=2, image_shift=0),
                    optimiser=OptimiserConfig(batch_size=8))
    learner = HILLearner(config(sac=sac, utd=1.0))
    assert learner.frozen_prefixes == ("encoder.encoders.pixels__front.backbone.",
                                       "encoder.encoders.pixels__wrist.backbone.")
    link, policy = LocalLink(learner), build_policy(learner.cfg)
    first = link.poll_weights()
    frozen = [k for k in first if k.startswith(learner.frozen_prefixes)]
    assert frozen and set(first) == set(policy.state_dict())
    load_acting_weights(policy, first)
    for s in range(6):
        link.push(chunk(1, start=s))
    assert learner.updates > 0
    later = link.poll_weights()
    assert set(later) == set(first) - set(frozen)
    assert sum(v.numel() for v in later.values()) < sum(v.numel() for v in first.values()) / 10
    load_acting_weights(policy, later)
    c = chunk(2, start=3)
    obs = {"state": torch.as_tensor(c["obs"]), **{g: torch.as_tensor(c[frame_keys(g)[0]]) for g in CAMERAS}}
    torch.testing.assert_close(policy.act(obs, deterministic=True), learner.agent.act(obs, deterministic=True))
    with pytest.raises(RuntimeError, match="missing"):
        load_acting_weights(policy, {k: v for k, v in later.items() if not k.startswith("actor.")})
    with pytest.raises(RuntimeError, match="unexpected"):
        load_acting_weights(policy, {**later, "actor.nothing": torch.zeros(1)})

    service = LearnerActor(config(sac=sac), tmp_path / "ray", checkpoint_every_s=1000.0)
    try:
        for s in range(6):
            service.add(chunk(1, start=s))
        deadline = time.monotonic() + 60.0
        while service.stats()["published_version"] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        version, new_actor = service.get_weights(-1)
        assert version > 0 and set(new_actor) == set(first)
        _, known_actor = service.get_weights(0)
        assert set(known_actor) == set(later)
    finally:
        service.stop(save=False)
