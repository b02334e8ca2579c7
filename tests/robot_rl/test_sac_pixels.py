"""SAC from cameras (DrQ): encoders per camera fused with proprioception, trained by the critic loss only, a target
encoder that follows at the critics' rate, and `robot-rl train env.spec=arm:reach-pixels` end to end."""

from __future__ import annotations

import csv

import pytest
import torch
from robot_rl.policies.encoders import ResNetBackbone

from robot_rl.agents.sac import SAC, EncoderConfig, SACConfig, camera_groups
from robot_rl.cli import main
from robot_rl.observations import ObservationPipeline
from robot_rl.replay import ReplayBuffer

SPEC = {"state": ((7,), torch.float32), "pixels/front": ((24, 24, 3), torch.uint8),
        "pixels/wrist": ((24, 24, 3), torch.uint8)}
TINY = {"network": {"hidden_dims": [32, 32]}, "optimiser": {"batch_size": 8},
        "encoder": {"feature_dim": 6, "channels": 4, "layers": 2, "image_shift": 2}}


def _agent(**groups: dict) -> SAC:
    """A tiny pixel agent, some keys of its groups changed (`encoder=dict(kind="pretrained", ...)`)."""
    torch.manual_seed(0)
    cfg = SACConfig.from_dict({g: TINY.get(g, {}) | groups.get(g, {}) for g in TINY.keys() | groups.keys()})
    return SAC(7, 4, cfg, cameras=camera_groups(SPEC))


def _replay(steps: int = 30) -> ReplayBuffer:
    g = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(100, 2, SPEC, 4, frames=("pixels/front", "pixels/wrist"), episode_steps=10)

    def frame() -> dict[str, torch.Tensor]:
        return {"state": torch.randn(2, 7, generator=g),
                **{k: torch.randint(0, 256, (2, 24, 24, 3), generator=g, dtype=torch.uint8) for k in SPEC if k != "state"}}

    obs = frame()
    for t in range(steps):
        nxt = frame()
        truncated = torch.full((2,), (t + 1) % 10 == 0)
        buf.add(obs, torch.rand(2, 4, generator=g) * 2 - 1, torch.randn(2, generator=g), nxt,
                torch.zeros(2, dtype=torch.bool), truncated)
        obs = frame() if truncated.any() else nxt
    return buf


def _params(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def test_pixel_agent_builds_an_encoder_per_camera() -> None:
    agent = _agent()
    assert agent.encoder is not None and agent.encoder.keys == ["pixels/front", "pixels/wrist"]
    assert agent.encoder.out_dim == 7 + 2 * 6
    assert camera_groups({"state": ((3,), torch.float32)}) == {}
    obs = {k: v[:3] for k, v in _replay().sample(3).obs.items()}
    assert agent.act(obs).shape == (3, 4) and agent.act(obs, deterministic=True).abs().max() <= 1
    state_only = SAC(7, 4, SACConfig.from_dict(TINY))
    assert state_only.encoder is None and state_only.features(obs) is obs["state"]


def test_the_encoder_learns_from_the_critic_loss_only() -> None:
    agent, buf = _agent(), _replay()
    batch = buf.sample(8, torch.Generator().manual_seed(1))
    # critic loss: gradients reach every encoder weight
    obs = agent.features(batch.obs, augment=True)
    with torch.no_grad():
        nxt = agent.features(batch.next_obs, augment=True)
        target_nxt = agent.features(batch.next_obs, augment=True, target=True)
    loss, _ = agent._critic_loss(obs, batch.action, batch.reward, batch.discount, nxt, target_nxt)
    loss.backward()
    grads = [p.grad for p in agent.encoder.parameters()]
    assert all(g is not None for g in grads) and all(g.abs().sum() > 0 for g in grads[:2])
    agent.critic_opt.zero_grad(set_to_none=True)
    # actor loss (on the features the update hands it): none reach the encoder, the actor does learn
    encoder, actor = _params(agent.encoder), _params(agent.actor)
    agent._update_actor_and_temperature(agent.features(batch.obs, augment=True).detach())
    assert all(p.grad is None for p in agent.encoder.parameters())
    assert all(torch.equal(a, b) for a, b in zip(encoder, agent.encoder.parameters(), strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(actor, agent.actor.parameters(), strict=True))


def test_update_trains_the_encoder_and_its_target_follows() -> None:
    agent, buf = _agent(), _replay()
    encoder, target = _params(agent.encoder), _params(agent.encoder_target)
    assert all(torch.equal(a, b) for a, b in zip(encoder, target, strict=True))  # the target starts as a copy
    metrics = agent.learn(buf, generator=torch.Generator().manual_seed(2))
    assert {"critic_loss", "actor_loss", "q_mean"} <= set(metrics)
    assert agent._actor_features is not None and not agent._actor_features.requires_grad
    new = _params(agent.encoder)
    assert not all(torch.equal(a, b) for a, b in zip(encoder, new, strict=True))
    for old_t, new_t, e in zip(target, agent.encoder_target.parameters(), new, strict=True):
        torch.testing.assert_close(new_t, old_t + agent.cfg.critic.tau * (e - old_t))  # Polyak at the critics' rate
    # a checkpoint carries the encoders
    other = _agent()
    other.load_state_dict(agent.state_dict())
    for a, b in zip(agent.encoder_target.parameters(), other.encoder_target.parameters(), strict=True):
        assert torch.equal(a, b)
    with pytest.raises(KeyError, match="encoder"):
        other.load_state_dict({k: v for k, v in agent.state_dict().items() if k != "encoder"})


def test_the_default_agent_learns_from_cameras_too() -> None:
    """agent=simba's options (hyperspherical nets, categorical critic, obs_norm, reward scaling) on camera features;
    obs_norm normalises the proprioceptive state before the fusion."""
    agent = _agent(network=dict(kind="hyper", critic_width=16, actor_width=16, obs_norm=True),
                   critic=dict(num_atoms=11, reward_scale=True),
                   optimiser=dict(utd=2))
    buf = _replay()
    agent.observe(buf.sample(8).obs, torch.ones(8), torch.zeros(8, dtype=torch.bool))
    assert agent.obs_norm.count == 8 and agent.actor.obs_norm is None
    metrics = agent.learn(buf, generator=torch.Generator().manual_seed(3))
    assert torch.isfinite(metrics["critic_loss"]) and "obs_norm" in agent.state_dict()


def test_train_arm_reach_pixels_end_to_end(tmp_path) -> None:
    """`robot-rl train env.spec=arm:reach-pixels` with tiny networks: learning starts, evaluation, checkpoint and
    the replay holding each camera frame once."""
    from robot_rl import checkpoint

    run = tmp_path / "run"
    assert main(["train", "env.spec=arm:reach-pixels", "train.steps=200", "train.learning_starts=100",
                 "agent=sac", "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=16",
                 "agent.encoder.channels=4",
                 "agent.encoder.layers=1", "agent.encoder.feature_dim=8", "env.pixel_size=[32,32]",
                 "env.num_eval_envs=1", "train.eval_every=100", "train.replay_capacity=1000", "train.video=false",
                 "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_step"]) for r in rows] == [100, 200] and int(rows[-1]["updates"]) == 101
    state = checkpoint.load(run / "checkpoints" / "latest.pt")
    replay = state["method"]["replay"] if "method" in state else state["replay"]
    assert set(replay["obs"]) == {"state", "pixels/front", "pixels/wrist"} and set(replay["next_obs"]) == {"state"}
    assert replay["obs"]["pixels/wrist"].shape[1:] == (1, 32, 32, 3)
    assert "encoder" in (state["method"] if "method" in state else state)["agent"]
    # a resumed run starts from reset envs: the replay closes the interrupted episodes and training goes on
    assert main(["train", f"resume={run}", "train.steps=240", "quiet=true"]) == 0
    with open(run / "metrics.csv") as f:
        assert [int(r["env_step"]) for r in csv.DictReader(f)] == [100, 200, 240]


def test_reach_pixels_preset_runs(tmp_path) -> None:
    """`experiment=reach_pixels` as it is (48x48 frames, the CPU-sized encoder), cut to a few steps."""
    run = tmp_path / "run"
    assert main(["train", "experiment=reach_pixels", "train.steps=80", "train.learning_starts=64",
                 "train.eval_every=80", "env.num_eval_envs=1", "train.video=false", "quiet=true", "threads=1",
                 f"run_dir={run}"]) == 0
    with open(run / "metrics.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["env_step"]) == 80 and int(row["updates"]) == 17  # from step 64: a full batch


def test_rlpd_push_pixels_preset_runs_on_camera_demos(tmp_path) -> None:
    """`experiment=rlpd_push_pixels` as it is (48x48 frames, half of each batch from camera demos), cut to a few
    steps, on two demos recorded here as its comment says."""
    demos, run = tmp_path / "demos", tmp_path / "run"
    assert main(["collect", "env.spec=arm:push-sparse-pixels", "policy=expert", "episodes=2",
                 "env.pixel_size=[48,48]", f"out={demos}"]) == 0
    assert main(["train", "experiment=rlpd_push_pixels", f"data.path={demos}", "train.steps=80",
                 "train.learning_starts=64", "train.eval_every=80", "env.num_eval_envs=1", "train.video=false",
                 "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    with open(run / "metrics.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["env_step"]) == 80 and int(row["updates"]) == 17


# -- a frozen pretrained backbone (HIL-SERL) --------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet10_weights(tmp_path_factory):
    """A resnet10 weights file as a user would give one (torchvision names, a classifier the encoder ignores),
    made here: nothing is downloaded."""

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet10.pt"
    torch.save({**ResNetBackbone("resnet10").state_dict(), "fc.weight": torch.zeros(10, 512)}, path)
    return path


def test_rlpd_push_pixels_pretrained_preset_runs_and_names_a_missing_backbone(tmp_path, resnet10_weights,
                                                                            capsys) -> None:
    """`experiment=rlpd_push_pixels_pretrained` as it is (a frozen resnet10, cached features, both mirrors, two
    critic steps per env step), cut to a few steps; without its backbone file it stops in one line naming it."""
    demos, run = tmp_path / "demos", tmp_path / "run"
    assert main(["collect", "env.spec=arm:push-sparse-pixels", "policy=expert", "episodes=2",
                 "env.pixel_size=[48,48]", f"out={demos}"]) == 0
    common = ["train", "experiment=rlpd_push_pixels_pretrained", f"data.path={demos}", "train.steps=80",
              "train.learning_starts=64", "train.eval_every=80", "env.num_eval_envs=1", "train.video=false",
              "quiet=true", "threads=1", "agent.optimiser.batch_size=64"]
    capsys.readouterr()
    assert main([*common, "agent.encoder.weights=/nonexistent/r10.pt", f"run_dir={tmp_path / 'x'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "backbone weights /nonexistent/r10.pt: no such file" in err and len(err.splitlines()) == 1, err
    assert main([*common, f"agent.encoder.weights={resnet10_weights}", f"run_dir={run}"]) == 0
    with open(run / "metrics.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["env_step"]) == 80 and int(row["updates"]) == 17  # from step 64 (two critic steps in each)
    # experiment=rlpd_push_pixels_readout: the same with each camera's frozen readout (13 outputs of a 48x48 frame's
    # 512x2x2 map); a backbone file without readouts is one line naming the keys it needs
    readout = tmp_path / "estimator.pt"
    heads = {f"readout.{c}.weight": torch.randn(13, 2048) * 0.02 for c in ("front", "wrist")}
    heads |= {f"readout.{c}.bias": torch.zeros(13) for c in ("front", "wrist")}
    torch.save({**torch.load(resnet10_weights), **heads}, readout)
    common[1] = "experiment=rlpd_push_pixels_readout"
    capsys.readouterr()
    assert main([*common, f"agent.encoder.weights={resnet10_weights}", f"run_dir={tmp_path / 'y'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no readout for camera group 'pixels/front'" in err and len(err.splitlines()) == 1, err
    assert main([*common, f"agent.encoder.weights={readout}", f"run_dir={tmp_path / 'readout'}"]) == 0
    with open(tmp_path / "readout" / "metrics.csv") as f:
        (row,) = list(csv.DictReader(f))
    assert int(row["env_step"]) == 80 and int(row["updates"]) == 17


def test_a_pretrained_encoder_trains_its_pooling_and_never_its_backbone(resnet10_weights) -> None:
    agent = _agent(encoder=dict(kind="pretrained", weights=str(resnet10_weights), spatial_features=2))
    backbones = {id(enc.backbone) for enc in agent.encoder.encoders.values()}
    target_backbones = {id(enc.backbone) for enc in agent.encoder_target.encoders.values()}
    assert len(backbones) == 1 and target_backbones == backbones  # one frozen network for cameras and target
    frozen, trained = _params(agent.encoder.encoders["pixels__front"].backbone), _params(agent.encoder)
    target = [p.detach().clone() for p in agent.encoder_target.parameters() if p.requires_grad is False]
    agent.learn(_replay(), generator=torch.Generator().manual_seed(2))
    assert all(torch.equal(a, b) for a, b in zip(frozen, agent.encoder.encoders["pixels__front"].backbone.parameters(),
                                                  strict=True))
    moved = [n for (n, p), old in zip(agent.encoder.named_parameters(), trained, strict=True) if not torch.equal(p, old)]
    assert moved and all(".pool." in n or ".head." in n for n in moved)
    assert not all(torch.equal(a, b) for a, b in zip(target, agent.encoder_target.parameters(), strict=False))
    # the checkpoint round trip restores pooling, projection and the backbone
    other = _agent(encoder=dict(kind="pretrained", weights=str(resnet10_weights), spatial_features=2))
    other.load_state_dict(agent.state_dict())
    obs = {k: v[:3] for k, v in _replay().sample(3).obs.items()}
    torch.testing.assert_close(other.act(obs, deterministic=True), agent.act(obs, deterministic=True))


def test_pretrained_encoder_config_errors_are_one_line(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"^agent.encoder.kind=pretrained needs agent.encoder.weights=<local backbone"):
        SACConfig(encoder=EncoderConfig(kind="pretrained")).validate()
    with pytest.raises(ValueError, match="^agent.encoder.kind must be one of conv, pretrained$"):
        SACConfig(encoder=EncoderConfig(kind="vit")).validate()
    with pytest.raises(ValueError, match="^agent.encoder.backbone must be one of resnet10, resnet18$"):
        SACConfig(encoder=EncoderConfig(backbone="resnet50")).validate()
    with pytest.raises(ValueError, match="no such file .*never downloads"):
        _agent(encoder=dict(kind="pretrained", weights=str(tmp_path / "missing.pt")))


def test_train_with_a_pretrained_encoder_exports_a_self_contained_policy(resnet10_weights, tmp_path, capsys) -> None:
    """`robot-rl train agent.encoder.kind=pretrained agent.encoder.weights=...` end to end; the exported policy carries
    the backbone, so it loads and acts where the weights file is not."""
    import shutil

    from robot_rl.policies import ActorPolicy, load_policy

    weights = tmp_path / "resnet10.pt"
    shutil.copy(resnet10_weights, weights)
    run = tmp_path / "run"
    assert main(["train", "env.spec=arm:reach-pixels", "env.pixel_size=[32,32]", "agent=sac",
                 "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", "agent.encoder.kind=pretrained",
                 f"agent.encoder.weights={weights}", "agent.encoder.feature_dim=8", "agent.encoder.spatial_features=2",
                 "train.steps=60", "train.learning_starts=50", "train.eval_every=60", "env.num_eval_envs=1",
                 "train.replay_capacity=200", "train.video=false", "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    weights.unlink()
    assert main(["export", f"run={run}", f"out={tmp_path / 'policy'}"]) == 0
    policy = load_policy(tmp_path / "policy")
    assert isinstance(policy, ActorPolicy) and policy.config()["encoder"] == "pretrained"
    obs = {"state": torch.zeros(2, 7), **{k: torch.full((2, 32, 32, 3), 128, dtype=torch.uint8) for k in CAMS}}
    assert policy.act(obs, deterministic=True).shape == (2, 4)
    capsys.readouterr()
    # a missing weights file is one line that says nothing is downloaded
    assert main(["train", "env.spec=arm:reach-pixels", "agent.encoder.kind=pretrained",
                 f"agent.encoder.weights={weights}",
                 "quiet=true", f"run_dir={tmp_path / 'run2'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no such file" in err and len(err.splitlines()) == 1, err


CAMS = ("pixels/front", "pixels/wrist")


def test_cached_embeddings_give_the_frames_result_without_the_backbone(resnet10_weights, monkeypatch) -> None:
    """`agent.encoder.cache_embeddings=true`: the replay stores each frame's backbone features (float16); updates read
    them and never run the backbone; acting on frames and on their cached features agree."""
    agent = _agent(encoder=dict(kind="pretrained", weights=str(resnet10_weights), spatial_features=2, image_shift=0,
                                cache_embeddings=True))
    spec = ObservationPipeline(agent).replay_spec(SPEC)
    assert spec["state"] == SPEC["state"] and spec["pixels/front"] == ((512, 1, 1), torch.float16)
    frames = _replay().sample(5).obs
    stored = ObservationPipeline(agent).for_replay(frames)
    assert stored["pixels/wrist"].dtype == torch.float16 and torch.equal(stored["state"], frames["state"])
    torch.testing.assert_close(agent.act(stored, deterministic=True), agent.act(frames, deterministic=True),
                               atol=2e-3, rtol=0)
    g = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(100, 2, spec, 4, frames=("pixels/front", "pixels/wrist"), episode_steps=10)

    def frame() -> dict[str, torch.Tensor]:
        return ObservationPipeline(agent).for_replay({"state": torch.randn(2, 7, generator=g), **{
            k: torch.randint(0, 256, (2, 24, 24, 3), generator=g, dtype=torch.uint8) for k in SPEC if k != "state"}})

    obs = frame()
    for t in range(20):
        nxt, truncated = frame(), torch.full((2,), (t + 1) % 10 == 0)
        buf.add(obs, torch.rand(2, 4) * 2 - 1, torch.randn(2), nxt, torch.zeros(2, dtype=torch.bool), truncated)
        obs = frame() if truncated.any() else nxt

    def no_backbone(*args, **kwargs):
        raise AssertionError("the backbone ran in an update")

    monkeypatch.setattr(agent.encoder.encoders["pixels__front"].backbone, "forward", no_backbone)
    assert torch.isfinite(agent.learn(buf, generator=torch.Generator().manual_seed(1))["critic_loss"])


def test_cached_embeddings_need_a_frozen_unshifted_encoder() -> None:
    for bad in (EncoderConfig(cache_embeddings=True),
                EncoderConfig(cache_embeddings=True, kind="pretrained", weights="w.pt")):
        with pytest.raises(ValueError, match="^agent.encoder.cache_embeddings=true needs agent.encoder.kind=pretrained "
                                             "and agent.encoder.image_shift=0"):
            SACConfig(encoder=bad).validate()


def _readout_weights(path, outputs: int = 5, cameras=("front", "wrist")):
    """A resnet10 file with a frozen linear readout per camera (512 features of a 24x24 or 32x32 frame -> `outputs`),
    as a pose estimator trained beside the backbone would be saved."""
    torch.manual_seed(3)
    state = dict(ResNetBackbone("resnet10").state_dict())
    for c in cameras:
        state[f"readout.{c}.weight"], state[f"readout.{c}.bias"] = torch.randn(outputs, 512) * 0.05, torch.randn(outputs)
    torch.save(state, path)
    return state


def test_a_readout_encoder_hands_the_policy_the_frozen_estimates(tmp_path) -> None:
    """`agent.encoder.readout=true`: each camera's features are the weights file's frozen readout of the backbone
    (nothing in the encoder trains), the replay caches those few numbers, and updates run without the backbone."""
    from robot_rl.policies.encoders import IMAGENET_MEAN, IMAGENET_STD

    state = _readout_weights(tmp_path / "estimator.pt")
    agent = _agent(encoder=dict(kind="pretrained", weights=str(tmp_path / "estimator.pt"), readout=True, feature_dim=5,
                                image_shift=0, cache_embeddings=True))
    assert not any(p.requires_grad for p in agent.encoder.parameters())
    assert ObservationPipeline(agent).replay_spec(SPEC)["pixels/wrist"] == ((5,), torch.float16)
    # a HIL learner sends an actor the frozen readouts once, with the backbone, not with every update
    from robot_rl.hil.learner import frozen_prefixes

    assert set(frozen_prefixes(agent.encoder)) == {f"encoders.pixels__{c}.{part}." for c in ("front", "wrist")
                                                   for part in ("backbone", "readout")}
    frames = _replay().sample(4).obs
    features = agent.features(frames)
    backbone = ResNetBackbone("resnet10").eval()
    backbone.load_state_dict({k: v for k, v in state.items() if not k.startswith("readout")})
    x = (frames["pixels/wrist"].permute(0, 3, 1, 2).float() / 255 - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) \
        / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    with torch.no_grad():
        expected = backbone(x).flatten(1) @ state["readout.wrist.weight"].T + state["readout.wrist.bias"]
    torch.testing.assert_close(features[:, -5:], expected, atol=1e-4, rtol=1e-4)  # wrist: the last group (sorted)
    g = torch.Generator().manual_seed(0)
    buf = ReplayBuffer(100, 2, ObservationPipeline(agent).replay_spec(SPEC), 4, frames=CAMS, episode_steps=10)

    def frame() -> dict[str, torch.Tensor]:
        return ObservationPipeline(agent).for_replay({"state": torch.randn(2, 7, generator=g), **{
            k: torch.randint(0, 256, (2, 24, 24, 3), generator=g, dtype=torch.uint8) for k in CAMS}})

    obs = frame()
    for t in range(20):
        nxt, truncated = frame(), torch.full((2,), (t + 1) % 10 == 0)
        buf.add(obs, torch.rand(2, 4) * 2 - 1, torch.randn(2), nxt, torch.zeros(2, dtype=torch.bool), truncated)
        obs = frame() if truncated.any() else nxt
    before = _params(agent.encoder) + [b.clone() for b in agent.encoder.buffers()]
    assert torch.isfinite(agent.learn(buf, generator=torch.Generator().manual_seed(1))["critic_loss"])
    after = _params(agent.encoder) + list(agent.encoder.buffers())
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_readout_errors_name_the_keys_and_the_size(tmp_path) -> None:
    from robot_rl.policies.encoders import BackboneWeightsError

    _readout_weights(tmp_path / "front_only.pt", cameras=("front",))
    with pytest.raises(BackboneWeightsError, match=r"no readout for camera group 'pixels/wrist' .*readout\.wrist\.weight"):
        _agent(encoder=dict(kind="pretrained", weights=str(tmp_path / "front_only.pt"), readout=True, feature_dim=5))
    with pytest.raises(BackboneWeightsError, match=r"readout\.front\.weight has shape \(5, 512\).*encoder_feature_dim=6"):
        _agent(encoder=dict(kind="pretrained", weights=str(tmp_path / "front_only.pt"), readout=True, feature_dim=6))
    with pytest.raises(ValueError, match="^agent.encoder.readout=true needs agent.encoder.kind=pretrained"):
        SACConfig(encoder=EncoderConfig(readout=True)).validate()


def test_train_with_a_readout_encoder_exports_a_policy_that_acts_the_same(tmp_path) -> None:
    """End to end on arm:reach-pixels with a readout encoder and cached features; the exported policy carries backbone
    and readouts, loads without the weights file and acts as the run's agent does."""
    from robot_rl.policies import load_policy

    weights = tmp_path / "estimator.pt"
    _readout_weights(weights, outputs=4)
    run = tmp_path / "run"
    assert main(["train", "env.spec=arm:reach-pixels", "env.pixel_size=[32,32]", "agent=sac",
                 "agent.network.hidden_dims=[32,32]", "agent.optimiser.batch_size=8", "agent.encoder.kind=pretrained",
                 f"agent.encoder.weights={weights}", "agent.encoder.readout=true", "agent.encoder.feature_dim=4",
                 "agent.encoder.cache_embeddings=true", "agent.encoder.image_shift=0",
                 "train.steps=60", "train.learning_starts=50", "train.eval_every=60", "env.num_eval_envs=1",
                 "train.replay_capacity=200", "train.video=false", "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    weights.unlink()
    assert main(["export", f"run={run}", f"out={tmp_path / 'policy'}"]) == 0
    policy = load_policy(tmp_path / "policy")
    assert policy.config()["encoder_readout"] is True
    g = torch.Generator().manual_seed(0)
    obs = {"state": torch.randn(3, 7, generator=g),
           **{k: torch.randint(0, 256, (3, 32, 32, 3), generator=g, dtype=torch.uint8) for k in CAMS}}
    features = policy.features(obs["state"], [obs[k] for k in CAMS])
    assert features.shape == (3, 7 + 2 * 4)
    assert len({tuple(r) for r in features[:, 7:].round(decimals=4).tolist()}) == 3  # the frames, not a constant
