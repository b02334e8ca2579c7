"""Pixel demonstrations: `robot-rl collect` in an `arm:<task>-pixels` task (a privileged scripted expert, cameras
recorded as videos, no privileged state in the dataset), read back as RLPD prior data into a frame replay buffer
(`OfflineData.load(cameras=...)`, `to_replay`), and `robot-rl train ... data.path=` using it, for RLPD and for
offline pretraining (WSRL). Small frames (32x32)
and short episodes keep the module at a few seconds."""

from __future__ import annotations

import json

import pytest
import torch
from robot_rl.envs.arm.constants import PROPRIO_INDEX

from robot_rl import envs
from robot_rl.collect import CollectArgs, CollectEnvArgs, collect
from robot_rl.datasets import read_dataset
from robot_rl.prior_data import OfflineData
from robot_rl.replay import ReplayBuffer, sample_mixed

SPEC = "arm:push-sparse-pixels"
CAMERAS = ("pixels/front", "pixels/wrist")
SIZE = (32, 32)
LIMIT = 12  # steps: the expert's push takes ~19, so some episodes end truncated, some (seed 0) terminated


def _collect(out, episodes: int = 3, **kw) -> dict:
    args = CollectArgs(env=CollectEnvArgs(spec=SPEC, num_envs=1, max_episode_steps=LIMIT, pixel_size=list(SIZE)),
                       out=str(out), episodes=episodes, policy="expert", seed=0, **kw)
    return collect(args, message=lambda m: None)


@pytest.fixture(scope="module")
def demos(tmp_path_factory):
    out = tmp_path_factory.mktemp("pixel_demos") / "push"
    _collect(out)
    return out


def test_a_pixel_dataset_holds_the_observation_only(demos) -> None:
    """observation.state is the 7 proprioception numbers (no cube or target), one video per camera under the
    camera's name, and nothing else observed."""
    features = json.loads((demos / "meta/info.json").read_text())["features"]
    assert features["observation.state"]["shape"] == [7] and features["next.observation.state"]["shape"] == [7]
    videos = {k: v["shape"] for k, v in features.items() if v["dtype"] == "video"}
    assert videos == {"observation.images.front": [32, 32, 3], "observation.images.wrist": [32, 32, 3]}
    assert {k for k in features if k.startswith("observation.")} == {"observation.state", *videos}
    assert (demos / "videos/observation.images.front/chunk-000/file-000.mp4").is_file()
    # One env recorded the episodes one after another: replaying their actions in a fresh env seeded alike gives
    # every observation again. States and actions exactly; the decoded frames up to the codec's loss.
    dataset = read_dataset(demos, load_images=True)
    t = dataset.transitions
    assert t.obs["state"].shape[1] == 7 and len(dataset.episodes) == 3
    with envs.make(SPEC, num_envs=1, seed=0, max_episode_steps=LIMIT, pixel_size=SIZE) as env:
        obs = env.reset()
        for i in range(len(dataset)):
            assert torch.equal(t.obs["state"][i], obs["state"][0])
            assert torch.equal(t.obs["state"][i], env.privileged_state()[0, list(PROPRIO_INDEX)])
            for group in CAMERAS:
                decoded = t.obs[group][i]
                assert (decoded.float() - obs[group][0].float()).abs().mean() < 12, (i, group)
            obs, *_ = env.step(t.action[i : i + 1])


def test_prior_buffer_from_pixel_demos(demos) -> None:
    """The prior buffer holds the decoded frames of both cameras and the states; truncated episodes lose their last
    step (no frame follows it) and end one step earlier; n-step sampling and sample_mixed work unchanged."""
    data = OfflineData.load(demos, 0.99, cameras=CAMERAS)
    data.check_fits(7, 4, "demos", {g: (*SIZE, 3) for g in CAMERAS})
    dataset = read_dataset(demos, load_images=True)
    t, frames = dataset.transitions, data.transitions.cameras
    assert torch.equal(data.transitions.obs["state"], t.obs["state"]) and torch.equal(data.transitions.action, t.action)
    assert torch.equal(frames["pixels/front"], t.obs["pixels/front"])
    buf = data.to_replay(0.99, 3, "cpu")
    truncated_episodes = int(t.truncated.sum())
    assert truncated_episodes >= 1 and int(t.terminated.sum()) >= 1  # both kinds of episode end are covered
    assert len(buf) == len(dataset) - truncated_episodes and buf.frames == CAMERAS
    # every stored transition, against the dataset: obs frames, next frames and states exactly; 3-step windows
    # stop at episode ends (a terminal step: discount 0; the new last step of a truncated episode: bootstrapped)
    kept = [i for i in range(len(dataset)) if t.terminated[i] or not t.truncated[i]]
    rows = torch.arange(len(kept))
    env0 = torch.zeros_like(rows)
    batch = buf._gather(rows, env0)
    next_frames = buf._next_frames(rows, env0)
    for r, i in enumerate(kept):
        assert torch.equal(batch.obs["state"][r], t.obs["state"][i]) and torch.equal(batch.action[r], t.action[i])
        assert torch.equal(buf.next_obs["state"][r, 0], t.next_obs["state"][i])
        for group in CAMERAS:
            assert torch.equal(batch.obs[group][r], frames[group][i])
            if t.terminated[i]:
                assert not next_frames[group][r].any()
            else:
                assert torch.equal(next_frames[group][r], frames[group][i + 1])
        ahead = [j for j in kept[r : r + 3] if dataset.episode_index[j] == dataset.episode_index[i]]
        ends_in_terminal = any(bool(t.terminated[j]) for j in ahead)
        assert float(batch.discount[r]) == pytest.approx(0.0 if ends_in_terminal else 0.99 ** len(ahead))
    # n-step windows stop at episode ends; sample_mixed mixes the prior with an online frame buffer as with states
    spec = {"state": ((7,), torch.float32), **{g: ((*SIZE, 3), torch.uint8) for g in CAMERAS}}
    online = ReplayBuffer(50, 1, spec, 4, frames=CAMERAS, episode_steps=LIMIT)
    step = {k: torch.zeros((1, *s), dtype=d) for k, (s, d) in spec.items()}
    for _ in range(5):
        online.add(step, torch.zeros(1, 4), torch.zeros(1), step, torch.zeros(1, dtype=torch.bool),
                   torch.zeros(1, dtype=torch.bool))
    mixed = sample_mixed(online, buf, batch_size=8, utd=2, prior_fraction=0.5,
                         generator=torch.Generator().manual_seed(0))
    assert mixed.obs["pixels/wrist"].shape == (2, 8, *SIZE, 3) and mixed.next_obs["state"].shape == (2, 8, 7)
    assert mixed.obs["pixels/front"][:, :4].float().mean() > 10 and not mixed.obs["pixels/front"][:, 4:].any()
    # offline pretraining's uniform batches: the kept steps only, each with its own frames and the next step's
    torch.manual_seed(0)
    sampled, mc_return = data.sample(64, 0.99)
    for r in range(64):
        (i,) = [j for j in kept if torch.equal(t.obs["state"][j], sampled.obs["state"][r])]
        assert torch.equal(sampled.next_obs["state"][r], t.next_obs["state"][i]) and mc_return[r] == data.mc_return[i]
        assert float(sampled.discount[r]) == pytest.approx(0.0 if t.terminated[i] else 0.99)
        for group in CAMERAS:
            assert torch.equal(sampled.obs[group][r], frames[group][i])
            if not t.terminated[i]:
                assert torch.equal(sampled.next_obs[group][r], frames[group][i + 1])


def test_collect_appends_noisy_pixel_demos(demos, tmp_path) -> None:
    """noise= and append= work in a pixel task; a camera the dataset lacks or another frame size is one line."""
    import shutil

    out = tmp_path / "mixed"
    shutil.copytree(demos, out)
    result = _collect(out, episodes=2, noise=0.5, append=True)
    assert result["episodes"] == 2 and len(read_dataset(out).episodes) == 5
    with pytest.raises(ValueError, match=r"has no observation.images.side video \(its videos: "
                                         r"\['observation.images.front', 'observation.images.wrist'\]\)"):
        OfflineData.load(out, 0.99, cameras=("pixels/side",))
    with pytest.raises(ValueError, match=r"pixels/front frames of shape \(32, 32, 3\), the env \(48, 48, 3\)"):
        OfflineData.load(out, 0.99, cameras=CAMERAS).check_fits(7, 4, "demos", {g: (48, 48, 3) for g in CAMERAS})


def test_train_rlpd_from_pixel_demos(demos, tmp_path) -> None:
    """`robot-rl train env.spec=arm:push-sparse-pixels data.path=<pixel demos>`: the prior buffer holds both
    cameras' frames and the states, and the agent's updates mix it in."""
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    cfg = compose_train_config([
        f"env.spec={SPEC}", f"data.path={demos}", "train.steps=40", "train.learning_starts=32", "agent=sac",
        "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", "agent.encoder.channels=4",
        "agent.encoder.layers=1",
        "agent.encoder.feature_dim=8", "env.pixel_size=[32,32]", f"env.max_episode_steps={LIMIT}",
        "env.num_eval_envs=1", "train.eval_every=40", "train.replay_capacity=200", "train.video=false",
        "quiet=true", "threads=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    prior = trainer.prior_replay
    assert prior is not None and prior.frames == CAMERAS and set(prior.obs) == {"state", *CAMERAS}
    flags = trainer.prior.transitions
    assert len(prior) == len(trainer.prior) - int((flags.truncated & ~flags.terminated).sum())
    assert prior.obs["pixels/front"][: prior._size].float().mean() > 10  # real frames, not zeros
    result = trainer.run()
    assert trainer.method.updates == 9 and "best_eval_return" in result  # from step 32 on: one update per step
    # the pixel checkpoint records in the same task (collect builds its agent with the env's cameras)
    args = CollectArgs(env=CollectEnvArgs(spec=SPEC, num_envs=1, max_episode_steps=3, pixel_size=list(SIZE)),
                       out=str(tmp_path / "sac"), episodes=1, policy=str(tmp_path / "run/checkpoints/latest.pt"))
    assert collect(args, message=lambda m: None)["episodes"] == 1


def test_mirrors_from_cameras_flip_the_frames(demos, tmp_path, capsys) -> None:
    """`data.mirror=true train.mirror_online=true` on push from cameras: the demos' and every online step's
    reflections hold the proprioception times the signs and both cameras' frames flipped left to right
    (`tests/envs/sim/test_arm_task.py` checks that a flipped frame is the reflected scene). With a frozen encoder and
    cached embeddings the reflected columns hold the backbone's features of the flipped frames (a feature map cannot
    be flipped); before, that combination stopped with a config error."""
    from robot_rl.cli import main
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    args = [f"env.spec={SPEC}", f"data.path={demos}", "data.mirror=true", "train.mirror_online=true",
            "train.steps=40", "train.learning_starts=30", "agent=sac", "agent.network.hidden_dims=[32,32]",
            "agent.optimiser.batch_size=8", "agent.encoder.channels=4", "agent.encoder.layers=1",
            "agent.encoder.feature_dim=8",
            "env.pixel_size=[32,32]", f"env.max_episode_steps={LIMIT}", "env.num_eval_envs=1", "train.eval_every=40",
            "train.replay_capacity=200", "train.video=false", "quiet=true", "threads=1"]
    trainer = Trainer(compose_train_config(args), tmp_path / "run")
    sign = trainer.env.reflection()
    assert sign.cameras == CAMERAS
    prior = trainer.prior
    m = len(prior) // 2
    obs = prior.transitions.obs
    assert torch.equal(obs["state"][m:], obs["state"][:m] * sign.state)
    for group in CAMERAS:
        assert torch.equal(obs[group][m:], obs[group][:m].flip(2)), group
    trainer.method.start(0)
    for _ in range(LIMIT + 3):  # past an episode end: the reflected columns' last frames too
        trainer.method.advance()
    replay, n = trainer.replay, LIMIT + 3
    assert replay.num_envs == 2
    assert torch.equal(replay.obs["state"][:n, 1], replay.obs["state"][:n, 0] * sign.state)
    assert torch.equal(replay.action[:n, 1], replay.action[:n, 0] * sign.action)
    for group in CAMERAS:
        frames = replay.obs[group][: n + 1]
        assert frames[:, 0].float().mean() > 10  # real frames
        assert torch.equal(frames[:, 1], frames[:, 0].flip(-2)), group
        assert torch.equal(replay.final_frames[group][:, 1], replay.final_frames[group][:, 0].flip(-2)), group
    batch = replay.sample(8)
    assert batch.obs["pixels/front"].shape == (8, 32, 32, 3)
    trainer.env.close()

    from robot_rl.policies.encoders import ResNetBackbone

    weights = tmp_path / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    cached = [a for a in args if not a.startswith("agent.encoder_")] + [
        "agent.encoder.kind=pretrained", f"agent.encoder.weights={weights}", "agent.encoder.cache_embeddings=true",
        "agent.encoder.image_shift=0", "agent.encoder.feature_dim=8", "agent.encoder.spatial_features=2",
        f"run_dir={tmp_path / 'c'}"]
    trainer = Trainer(compose_train_config(cached), tmp_path / "c")
    fusion = trainer.method.agent.encoder
    m = len(trainer.prior) // 2
    for group in CAMERAS:  # the demos' reflections: features of their flipped frames
        torch.testing.assert_close(trainer.prior.transitions.obs[group][m:],
                                   fusion.frozen_features(group, obs[group][:m].flip(2)))
    method = trainer.method
    method.start(0)
    seen = []
    real_step = method.env.step
    method.env.step = lambda a: (out := real_step(a), seen.append(out))[0]
    for _ in range(LIMIT + 3):  # past an episode end: the final observations' reflections too
        method.advance()
    replay = trainer.replay
    assert replay.num_envs == 2 and replay.obs_spec["pixels/front"][1] == torch.float16
    assert torch.equal(replay.action[:n, 1], replay.action[:n, 0] * sign.action)
    assert torch.equal(replay.reward[:n, 1], replay.reward[:n, 0])
    final = seen[LIMIT - 1][4]["final_obs"]  # the step that ended the first episode
    for group in CAMERAS:
        obs = seen[2][0][group]  # the observation stored at row 3
        torch.testing.assert_close(replay.obs[group][3, 0], fusion.frozen_features(group, obs)[0])
        torch.testing.assert_close(replay.obs[group][3, 1], fusion.frozen_features(group, obs.flip(-2))[0])
        torch.testing.assert_close(replay.final_frames[group][0, 0], fusion.frozen_features(group, final[group])[0])
        torch.testing.assert_close(replay.final_frames[group][0, 1],
                                   fusion.frozen_features(group, final[group].flip(-2))[0])
    assert main(["train", *cached, "train.steps=34"]) == 0  # and it trains


@pytest.mark.parametrize("algorithm", ["calql", "iql"])
def test_offline_pretraining_from_pixel_demos_trains_the_encoder_then_goes_online(demos, tmp_path, algorithm) -> None:
    """WSRL from cameras: Cal-QL or IQL on the pixel demos (the critic loss trains the encoder), then online."""
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    cfg = compose_train_config([
        f"env.spec={SPEC}", f"data.path={demos}", "offline.steps=6", "offline.eval_every=6",
        f"offline.algorithm={algorithm}", "data.mix_online=false", "train.steps=8", "train.learning_starts=4",
        "agent=sac", "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", "agent.encoder.channels=4",
        "agent.encoder.layers=1", "agent.encoder.feature_dim=8", "env.pixel_size=[32,32]",
        f"env.max_episode_steps={LIMIT}", "env.num_eval_envs=1", "train.eval_every=8", "train.replay_capacity=200",
        "train.video=false", "quiet=true", "threads=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    before = [p.detach().clone() for p in trainer.method.agent.encoder.parameters()]
    trainer.run()
    after = list(trainer.method.agent.encoder.parameters())
    assert trainer.method.offline_updates == 6 and trainer.prior_replay is None
    assert any(not torch.equal(a, b) for a, b in zip(after, before, strict=True))  # the encoder learned offline
    with open(tmp_path / "run" / "offline_metrics.csv") as f:
        assert len(f.read().strip().splitlines()) == 2  # header + the row at step 6


def test_rlpd_with_cached_embeddings_stores_features_online_and_prior(demos, tmp_path) -> None:
    """A frozen pretrained encoder with `agent.encoder.cache_embeddings=true`: both replays hold the backbone's float16
    features in place of frames (the demos' go through the backbone once at load), and training runs on them."""
    from robot_rl.policies.encoders import ResNetBackbone

    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    weights = tmp_path / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    cfg = compose_train_config([
        f"env.spec={SPEC}", f"data.path={demos}", "train.steps=40", "train.learning_starts=32", "agent=sac",
        "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", "agent.encoder.kind=pretrained",
        f"agent.encoder.weights={weights}", "agent.encoder.image_shift=0", "agent.encoder.cache_embeddings=true",
        "agent.encoder.feature_dim=8", "agent.encoder.spatial_features=2", "env.pixel_size=[32,32]",
        f"env.max_episode_steps={LIMIT}", "env.num_eval_envs=1", "train.eval_every=40", "train.replay_capacity=200",
        "train.video=false", "quiet=true", "threads=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    for replay in (trainer.prior_replay, trainer.replay):
        assert replay.obs_spec["pixels/front"] == ((512, 1, 1), torch.float16)
    assert trainer.prior.transitions.obs["pixels/wrist"].shape[1:] == (512, 1, 1)
    result = trainer.run()
    assert trainer.method.updates == 9 and "best_eval_return" in result
    assert trainer.replay.obs["pixels/front"][: trainer.replay._size].abs().sum() > 0


def test_cached_embeddings_run_the_backbone_once_per_camera_and_step(tmp_path) -> None:
    """With cached embeddings the new observations pass the backbone once: they are the next step's obs and, where
    no episode ended, this transition's next_obs; only finished envs pass their final observation too. The stored
    next_obs features are those of the true final observation."""
    from robot_rl.policies.encoders import ResNetBackbone

    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    weights = tmp_path / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), weights)
    cfg = compose_train_config([
        f"env.spec={SPEC}", "train.steps=20", "train.learning_starts=0", "agent=sac",
        "agent.network.hidden_dims=[32,32]",
        "agent.optimiser.batch_size=64", "agent.encoder.kind=pretrained", f"agent.encoder.weights={weights}",
        "agent.encoder.image_shift=0",
        "agent.encoder.cache_embeddings=true", "agent.encoder.feature_dim=8", "agent.encoder.spatial_features=2",
        "env.pixel_size=[32,32]", "env.max_episode_steps=4", "env.num_envs=2", "env.num_eval_envs=1",
        "train.replay_capacity=200", "train.video=false", "quiet=true", "threads=1"])
    method = Trainer(cfg, tmp_path / "run").method
    method.start(seed=0)
    backbone = next(m for m in method.agent.encoder.modules() if isinstance(m, ResNetBackbone))
    rows, added, real_forward, real_add = [], [], backbone.forward, method.replay.add
    backbone.forward = lambda x: rows.append(x.shape[0]) or real_forward(x)
    method.replay.add = lambda obs, a, r, nxt, te, tr: added.append(nxt) or real_add(obs, a, r, nxt, te, tr)
    real_step, finals = method.env.step, []
    method.env.step = lambda a: (out := real_step(a), finals.append(out[4]["final_obs"]))[0]
    for _ in range(6):  # episodes of 4 steps: both envs finish at step 4
        method.advance()
    cameras = 2
    assert sum(rows) == cameras * (6 * 2 + 2)  # 6 steps x 2 envs of new observations + the 2 final observations
    method.replay.add = real_add
    expected = method.pipeline.for_replay({k: finals[3][k] for k in method.groups})
    for group in CAMERAS:
        torch.testing.assert_close(added[3][group], expected[group])


def test_a_state_policy_records_in_its_camera_variant_acting_on_the_full_state(tmp_path, monkeypatch) -> None:
    """`robot-rl collect env.spec=arm:push-sparse-pixels policy=<checkpoint of arm:push-sparse>`: the policy reads
    the simulator's full state (its own task's observation) while the dataset gets proprioception and frames; how the
    frames of what a policy trained on a classifier's reward does are recorded to train the classifier again.
    Before, the checkpoint was built for the camera task's 7-number state and refused (a different task). A
    checkpoint of another state task is still refused, naming both."""
    from robot_rl import checkpoint
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    cfg = compose_train_config([
        "env.spec=arm:push-sparse", "train.steps=20", "train.learning_starts=10", "agent=sac",
        "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", f"env.max_episode_steps={LIMIT}",
        "env.num_eval_envs=1",
        "train.eval_every=20", "train.replay_capacity=100", "train.video=false", "quiet=true", "threads=1"])
    Trainer(cfg, tmp_path / "run").run()
    calls, make = [], envs.make

    def make_counting(*a, **kw):  # the env whose privileged_state() the policy reads, counted
        env = make(*a, **kw)
        real = env.privileged_state
        env.privileged_state = lambda: calls.append(1) or real()
        return env

    monkeypatch.setattr(envs, "make", make_counting)
    args = CollectArgs(env=CollectEnvArgs(spec=SPEC, num_envs=2, max_episode_steps=4, pixel_size=list(SIZE)),
                       out=str(tmp_path / "policy"), episodes=3, policy=str(tmp_path / "run/checkpoints/latest.pt"))
    assert collect(args, message=lambda m: None)["episodes"] == 3
    data = read_dataset(tmp_path / "policy", load_images=True)
    assert data.transitions.obs["state"].shape[1] == len(PROPRIO_INDEX) and len(data.episodes.index) == 3
    assert data.transitions.obs["pixels/front"].float().mean() > 10
    assert len(calls) >= len(data) // 2  # a full-state read per batched step (2 envs each)
    with envs.make("arm:push-sparse") as state_env:
        full_dim = state_env.observation_spec["state"][0][0]
    assert full_dim > len(PROPRIO_INDEX)
    # another state task's policy is refused, naming what it was trained on
    cfg = compose_train_config(["env.spec=arm:reach", "train.steps=2", "train.learning_starts=1", "agent=sac",
                                "agent.network.hidden_dims=[32,32]", "env.num_eval_envs=1", "train.eval_every=2",
                                "train.replay_capacity=100", "train.video=false", "quiet=true", "threads=1"])
    Trainer(cfg, tmp_path / "reach").run()
    args.policy, args.out = str(tmp_path / "reach/checkpoints/latest.pt"), str(tmp_path / "reach_data")
    with pytest.raises(checkpoint.CheckpointError, match="trained on arm:reach, not on arm:push-sparse-pixels"):
        collect(args, message=lambda m: None)
