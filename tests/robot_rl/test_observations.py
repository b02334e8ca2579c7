"""ObservationPipeline (robot_rl.observations): augmented copies are the augmentation of the originals, the cache
stores the backbone's features of the (augmented) frames, the statistics are those of the collected transitions, and
the trainer, the HIL learner and prior data all store through it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from robot_rl.envs.core import Reflection
from robot_rl.policies.encoders import IMAGENET_MEAN, IMAGENET_STD, ResNetBackbone

from robot_rl import observations
from robot_rl.agents.sac import SAC, NetworkConfig, OptimiserConfig, SACConfig
from robot_rl.observations import Mirror, ObservationPipeline
from robot_rl.prior_data import OfflineData
from robot_rl.replay import ReplayBuffer
from robot_rl.transitions import Transitions

pytestmark = pytest.mark.usefixtures("one_thread")

N, D, A, SIZE = 3, 5, 3, 16
CAMS = ("pixels/front", "pixels/wrist")
SPEC = {"state": ((D,), torch.float32), **{c: ((SIZE, SIZE, 3), torch.uint8) for c in CAMS}}
SIGNS = Reflection(torch.tensor([1.0, -1.0, 1.0, -1.0, 1.0]), torch.tensor([1.0, -1.0, 1.0]), CAMS)


def _obs(n: int, g: torch.Generator, cameras: bool = True) -> dict[str, torch.Tensor]:
    obs = {"state": torch.randn(n, D, generator=g) * 2 + 1}
    if cameras:
        obs |= {c: torch.randint(0, 256, (n, SIZE, SIZE, 3), generator=g, dtype=torch.uint8) for c in CAMS}
    return obs


def _data(m: int, truncated: list[bool], frames: dict[str, torch.Tensor] | None = None, **kw) -> OfflineData:
    """M transitions, not terminated, with Monte-Carlo returns of any size (what the statistics read)."""
    return OfflineData(Transitions({"state": torch.randn(m, D) + 3, **(frames or {})}, torch.rand(m, A), torch.randn(m),
                                   {"state": torch.randn(m, D)}, torch.zeros(m, dtype=torch.bool),
                                   torch.tensor(truncated)), torch.randn(m) * 4, 1, None, **kw)


def _agent(cameras: bool = True, **groups: dict) -> SAC:
    """A small agent, some keys of its groups changed (`network=dict(obs_norm=True)`)."""
    torch.manual_seed(0)
    base = {"network": {"hidden_dims": [16, 16]}, "optimiser": {"batch_size": 4},
            "encoder": {"feature_dim": 4, "channels": 4, "layers": 1}}
    cfg = SACConfig.from_dict({g: base.get(g, {}) | groups.get(g, {}) for g in base.keys() | groups.keys()})
    return SAC(D, A, cfg, cameras={c: (SIZE, SIZE, 3) for c in CAMS} if cameras else None)


def _run(pipeline: ObservationPipeline, replay: ReplayBuffer, steps: int, g: torch.Generator,
         cameras: bool = True) -> list[Transitions]:
    """`steps` vector env steps through `add_step`, episodes of 4 steps (truncated), autoreset as `BatchedEnv`
    does: the returned steps' next_obs are the final observations."""
    obs, collected = _obs(N, g, cameras), []
    pipeline.start(obs)
    for t in range(steps):
        final, truncated = _obs(N, g, cameras), torch.full((N,), t % 4 == 3)
        terminated = torch.zeros(N, dtype=torch.bool)
        terminated[0] = t == 5  # an episode that ends early, in one env only
        done = terminated | truncated
        next_obs = {k: torch.where(done.view(-1, *[1] * (v.dim() - 1)), _obs(N, g, cameras)[k], v)
                    for k, v in final.items()}
        step = Transitions(obs, torch.rand(N, A, generator=g) * 2 - 1, torch.randn(N, generator=g), final,
                           terminated, truncated)
        pipeline.add_step(replay, step, next_obs)
        collected.append(step)
        obs = next_obs
    return collected


def test_mirrored_transitions_are_the_reflections_of_the_originals() -> None:
    """Online columns N.. of every replay row (obs, next frames, last frames of truncated episodes, actions, rewards
    and flags), a chunk's copy and a dataset's second half are the reflections of the originals."""
    g = torch.Generator().manual_seed(0)
    pipeline = ObservationPipeline(_agent(), ("state", *CAMS), online=[Mirror(SIGNS)], prior=[Mirror(SIGNS)])
    assert pipeline.copies == 2
    replay = ReplayBuffer(50, 2 * N, pipeline.replay_spec(SPEC), A, frames=CAMS, episode_steps=4)
    steps = _run(pipeline, replay, 8, g)
    t = len(steps)
    assert torch.equal(replay.obs["state"][:t, :N], torch.stack([s.obs["state"] for s in steps]))
    assert torch.equal(replay.obs["state"][:t, N:], replay.obs["state"][:t, :N] * SIGNS.state)
    assert torch.equal(replay.next_obs["state"][:t, N:], replay.next_obs["state"][:t, :N] * SIGNS.state)
    assert torch.equal(replay.action[:t, N:], replay.action[:t, :N] * SIGNS.action)
    for name in ("reward", "terminated", "truncated"):
        assert torch.equal(getattr(replay, name)[:t, N:], getattr(replay, name)[:t, :N]), name
    for c in CAMS:
        assert torch.equal(replay.obs[c][: t + 1, N:], replay.obs[c][: t + 1, :N].flip(-2)), c
        assert torch.equal(replay.final_frames[c][:, N:], replay.final_frames[c][:, :N].flip(-2)), c

    chunk = steps[0]
    original, mirrored = pipeline.chunk(chunk)
    assert original is chunk
    for name, image in (("obs", SIGNS.observation(chunk.obs)), ("next_obs", SIGNS.observation(chunk.next_obs))):
        got = getattr(mirrored, name)
        assert got.keys() == image.keys() and all(torch.equal(got[k], image[k]) for k in image), name
    assert torch.equal(mirrored.action, chunk.action * SIGNS.action) and mirrored.reward is chunk.reward

    m = 6
    data = _data(m, [False, False, True] * 2, episode_index=torch.tensor([0, 0, 0, 1, 1, 1]),
                 frames={c: torch.randint(0, 256, (m, SIZE, SIZE, 3), dtype=torch.uint8) for c in CAMS})
    t = data.transitions
    both = pipeline.prior_data(data)
    assert len(both) == 2 * m and both.num_episodes == 2
    b = both.transitions
    assert torch.equal(b.obs["state"][m:], t.obs["state"] * SIGNS.state)
    assert torch.equal(b.next_obs["state"][m:], t.next_obs["state"] * SIGNS.state)
    assert torch.equal(b.action[m:], t.action * SIGNS.action)
    for name in ("reward", "terminated", "truncated"):
        assert torch.equal(getattr(b, name), getattr(t, name).repeat(2)), name
    assert torch.equal(both.mc_return, data.mc_return.repeat(2))
    assert both.episode_index.tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    for c in CAMS:
        assert torch.equal(b.obs[c], torch.cat([t.obs[c], t.obs[c].flip(-2)])), c


@pytest.fixture(scope="module")
def resnet10(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("weights") / "resnet10.pt"
    torch.save(ResNetBackbone("resnet10").state_dict(), path)
    return path


def test_the_cache_stores_the_backbones_features_of_the_frames(resnet10: Path) -> None:
    """With cached embeddings every stored frame (online, its mirror image, a dataset's) is the frozen backbone's
    float16 features of that frame, computed here directly from the weights file."""
    agent = _agent(encoder=dict(kind="pretrained", weights=str(resnet10), spatial_features=2, image_shift=0,
                                cache_embeddings=True))
    backbone = ResNetBackbone("resnet10").eval()
    backbone.load_state_dict(torch.load(resnet10))
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in (IMAGENET_MEAN, IMAGENET_STD))

    def features(frames: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return backbone((frames.permute(0, 3, 1, 2).float() / 255 - mean) / std).half()

    pipeline = ObservationPipeline(agent, ("state", *CAMS), online=[Mirror(SIGNS)])
    spec = pipeline.replay_spec(SPEC)
    assert spec["state"] == SPEC["state"] and spec["pixels/front"] == ((512, 1, 1), torch.float16)
    replay = ReplayBuffer(50, 2 * N, spec, A, frames=CAMS, episode_steps=4)
    g = torch.Generator().manual_seed(1)
    steps = _run(pipeline, replay, 6, g)
    for t, step in enumerate(steps):
        for c in CAMS:
            stored = replay.obs[c][t]
            torch.testing.assert_close(stored[:N], features(step.obs[c]), atol=2e-3, rtol=1e-3)
            torch.testing.assert_close(stored[N:], features(step.obs[c].flip(-2)), atol=2e-3, rtol=1e-3)
    # the agent acts on what was stored for the current observations (the backbone ran once on them)
    acting = pipeline.acting({"state": torch.zeros(N, D)})
    assert acting["pixels/front"].dtype == torch.float16 and acting["pixels/front"].shape[0] == N

    m = 5
    frames = {c: torch.randint(0, 256, (m, SIZE, SIZE, 3), dtype=torch.uint8) for c in CAMS}
    data = _data(m, [False] * 4 + [True], frames=dict(frames))
    stored = pipeline.prior_data(data).transitions.cameras
    for c in CAMS:
        assert stored[c].device.type == "cpu"
        torch.testing.assert_close(stored[c], features(frames[c]), atol=2e-3, rtol=1e-3)


def test_a_chunk_passes_the_backbone_once_per_frame(resnet10: Path) -> None:
    """A HIL chunk's cached features are each row's own (obs and next obs through the backbone one by one), with the
    backbone run on each frame once: its steps' frames and the next frames where an episode ended and at the end;
    in the next chunk, not again on the frames it starts from."""
    agent = _agent(encoder=dict(kind="pretrained", weights=str(resnet10), spatial_features=2, image_shift=0,
                                cache_embeddings=True))
    pipeline = ObservationPipeline(agent, ("state", *CAMS))
    g = torch.Generator().manual_seed(2)
    frames = _obs(7, g)  # two episodes: steps 0-2 end with a final observation of their own, steps 3-5 run on
    final = _obs(1, g)
    obs = {k: torch.cat([v[:3], v[4:]]) for k, v in frames.items()}  # six steps
    next_obs = {k: torch.cat([v[1:3], final[k], v[5:], v[6:]]) for k, v in frames.items()}  # the last: frame 6 again
    chunk = Transitions(obs, torch.zeros(6, A), torch.zeros(6), next_obs, torch.zeros(6, dtype=torch.bool),
                        torch.tensor([False, False, True, False, False, False]))
    frames_in = []
    backbone = agent.encoder.encoders["pixels__front"].backbone
    backbone.register_forward_hook(lambda _, args, __: frames_in.append(args[0].shape[0]))
    stored = pipeline.chunk_for_replay(chunk)
    assert sum(frames_in) == 2 * (6 + 2)  # both cameras: 6 steps' frames, the first episode's final and the last
    for i in range(6):
        row = chunk.rows(slice(i, i + 1))
        for c in CAMS:
            torch.testing.assert_close(stored.obs[c][i], pipeline.for_replay(row.obs)[c][0])
            torch.testing.assert_close(stored.next_obs[c][i], pipeline.for_replay(row.next_obs)[c][0])
    assert torch.equal(stored.obs["state"], obs["state"]) and torch.equal(stored.next_obs["state"], next_obs["state"])

    # the next chunk, one step as a HIL actor sends it, starts from this chunk's last next frames: one new frame each
    frames_in.clear()
    more = _obs(1, g)
    step = Transitions({k: next_obs[k][-1:] for k in obs}, torch.zeros(1, A), torch.zeros(1), more,
                       torch.zeros(1, dtype=torch.bool), torch.zeros(1, dtype=torch.bool))
    stored = pipeline.chunk_for_replay(step)
    assert sum(frames_in) == 2
    for c in CAMS:
        torch.testing.assert_close(stored.obs[c], pipeline.for_replay(step.obs)[c])
        torch.testing.assert_close(stored.next_obs[c], pipeline.for_replay(more)[c])


def _discounted(rewards: torch.Tensor, dones: torch.Tensor, gamma: float) -> torch.Tensor:
    """Running discounted returns [T, N] of rewards [T, N], restarting after each done."""
    running, out = torch.zeros(rewards.shape[1]), []
    for r, d in zip(rewards, dones, strict=True):
        running = gamma * running + r
        out.append(running)
        running = running * (~d).float()
    return torch.stack(out)


def test_statistics_are_those_of_the_collected_transitions() -> None:
    """Observation and return statistics fed by the pipeline equal the agent's own `observe` of the same steps
    (what the loops called before) and a direct computation; augmented copies add nothing online, a dataset's
    reflection is part of the prior data (as with data.mirror before)."""
    cfg = {"network": {"obs_norm": True}, "critic": {"reward_scale": True}}
    agent, before = _agent(cameras=False, **cfg), _agent(cameras=False, **cfg)
    pipeline = ObservationPipeline(agent, online=[Mirror(SIGNS)])
    replay = ReplayBuffer(50, 2 * N, {"state": SPEC["state"]}, A)
    steps = _run(pipeline, replay, 9, torch.Generator().manual_seed(2), cameras=False)
    for s in steps:
        before.observe(s.obs, s.reward, s.terminated | s.truncated)
    assert all(torch.equal(a, b) for a, b in zip(agent.obs_norm.state_dict().values(),
                                                  before.obs_norm.state_dict().values(), strict=True))
    assert all(torch.equal(a, b) for a, b in zip(agent.return_scale.state_dict().values(),
                                                  before.return_scale.state_dict().values(), strict=True))
    states = torch.cat([s.obs["state"] for s in steps])
    torch.testing.assert_close(agent.obs_norm.mean, states.mean(0))
    torch.testing.assert_close(agent.obs_norm.var, states.var(0, unbiased=False))
    returns = _discounted(torch.stack([s.reward for s in steps]),
                          torch.stack([s.terminated | s.truncated for s in steps]), agent.cfg.critic.gamma).flatten()
    torch.testing.assert_close(agent.return_scale.returns.mean, returns.mean().view(1))
    torch.testing.assert_close(agent.return_scale.abs_max, returns.abs().max())

    # a HIL chunk: consecutive steps of one env, fed one at a time
    agent = _agent(cameras=False, **cfg)
    pipeline = ObservationPipeline(agent, online=[Mirror(SIGNS)])
    g = torch.Generator().manual_seed(3)
    rewards, done = torch.randn(7, generator=g), torch.tensor([False, False, True, False, False, False, False])
    chunk = Transitions(_obs(7, g, False), torch.rand(7, A), rewards, _obs(7, g, False), done,
                        torch.zeros(7, dtype=torch.bool))
    pipeline.chunk(chunk)
    torch.testing.assert_close(agent.obs_norm.mean, chunk.obs["state"].mean(0))
    returns = _discounted(rewards.view(7, 1), done.view(7, 1), agent.cfg.critic.gamma).flatten()
    torch.testing.assert_close(agent.return_scale.returns.mean, returns.mean().view(1))
    pipeline.chunk(chunk, online=False)  # demonstrations received as chunks feed nothing
    torch.testing.assert_close(agent.obs_norm.mean, chunk.obs["state"].mean(0))
    assert int(agent.obs_norm.count) == 7

    # a dataset and its reflection: their states and Monte-Carlo returns
    agent = _agent(cameras=False, **cfg)
    m = 8
    data = _data(m, [False] * m)
    ObservationPipeline(agent, prior=[Mirror(SIGNS)]).prior_data(data)
    state = data.transitions.obs["state"]
    both = torch.cat([state, state * SIGNS.state])
    torch.testing.assert_close(agent.obs_norm.mean, both.mean(0))
    torch.testing.assert_close(agent.return_scale.returns.mean, data.mc_return.mean().view(1))
    torch.testing.assert_close(agent.return_scale.abs_max, data.mc_return.abs().max())


class _Counting(Mirror):
    """A mirror that counts the transitions it maps (each augmented transition passes `action` once)."""

    rows: list[int] = []

    def action(self, action: torch.Tensor) -> torch.Tensor:
        _Counting.rows.append(int(action.shape[0]))
        return super().action(action)


def test_the_trainer_and_prior_data_store_through_the_pipeline(tmp_path: Path, monkeypatch) -> None:
    """`train.mirror_online=true data.mirror=true`: the augmentation sees the dataset once, then each env step's N
    transitions once, and the replays hold exactly the originals and what it made of them."""
    from robot_rl import trainer as trainer_module
    from robot_rl.cli import main
    from robot_rl.config import compose_train_config

    out = tmp_path / "push"
    assert main(["collect", "env.spec=arm:push-sparse", "episodes=1", "env.num_envs=1", f"out={out}"]) == 0
    monkeypatch.setattr(trainer_module, "Mirror", _Counting)
    _Counting.rows = []
    cfg = compose_train_config([
        "env.spec=arm:push-sparse", f"data.path={out}", "data.mirror=true", "train.mirror_online=true",
        "env.num_envs=2", "agent=sac", "agent.network.hidden_dims=[16,16]", "agent.optimiser.batch_size=8",
        "train.learning_starts=100",
        "env.num_eval_envs=1", "train.video=false", "quiet=true", "threads=1"])
    trainer = trainer_module.Trainer(cfg, tmp_path / "run")
    assert isinstance(trainer.method.pipeline.online[0], _Counting)
    m = len(trainer.prior) // 2
    assert _Counting.rows == [m] and len(trainer.prior_replay) == 2 * m
    trainer.method.start(0)
    for _ in range(5):
        trainer.method.advance()
    assert _Counting.rows == [m] + [2] * 5 and len(trainer.replay) == 2 * sum(_Counting.rows[1:])
    trainer.env.close()


def test_the_hil_learner_stores_through_the_pipeline(monkeypatch) -> None:
    """mirror_online and mirror_demos: each received chunk passes the augmentation once (its intervention rows reach
    the prior buffer from the same copies), each demo chunk once; the buffers hold the originals and their images."""
    from robot_rl.hil import learner as learner_module

    monkeypatch.setattr(learner_module, "Mirror", _Counting)
    _Counting.rows = []
    cfg = learner_module.LearnerConfig(
        obs_dim=D, action_dim=A, capacity=100, prior_capacity=100,
        sac=SACConfig(network=NetworkConfig(hidden_dims=[16, 16]), optimiser=OptimiserConfig(batch_size=4)),
        mirror_state_sign=SIGNS.state.tolist(), mirror_action_sign=SIGNS.action.tolist(), mirror_online=True,
        mirror_demos=True)
    learner = learner_module.HILLearner(cfg)
    rng = np.random.default_rng(0)

    def chunk(n: int, intervention: list[bool]) -> dict[str, np.ndarray]:
        f32 = np.float32
        return {"obs": rng.normal(size=(n, D)).astype(f32), "next_obs": rng.normal(size=(n, D)).astype(f32),
                "action": rng.uniform(-1, 1, (n, A)).astype(f32), "reward": rng.normal(size=n).astype(f32),
                "terminated": np.zeros(n, bool), "truncated": np.zeros(n, bool), "intervention": np.array(intervention)}

    learner.add(chunk(5, [False, True, True, False, False]))
    demo = chunk(3, [False] * 3)
    learner.add_prior(demo)
    assert _Counting.rows == [5, 3]
    assert len(learner.online) == 2 * 5 and len(learner.prior) == 2 * 2 + 2 * 3
    torch.testing.assert_close(learner.prior.action[7:10, 0], torch.from_numpy(demo["action"]) * SIGNS.action)
    assert learner.demo_transitions == 6


def test_a_dataset_with_a_camera_the_augmentation_cannot_map_is_refused() -> None:
    from robot_rl.datasets import DatasetError

    m = 2
    data = _data(m, [True] * m, frames={"pixels/side": torch.zeros(m, SIZE, SIZE, 3, dtype=torch.uint8)})
    with pytest.raises(DatasetError, match="does not cover camera pixels/side of this dataset"):
        ObservationPipeline(_agent(cameras=False), prior=[Mirror(SIGNS)]).prior_data(data)
    assert observations.Mirror(SIGNS).uncovered(["state", *CAMS, "pixels/side"]) == ["pixels/side"]
