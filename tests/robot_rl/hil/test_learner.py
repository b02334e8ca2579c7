"""HILLearner and LocalLink: chunk validation, HIL-SERL routing, RLPD mixing, the utd schedule, weights, checkpoints."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from robot_rl.policies import TanhGaussianActor

from robot_rl.agents.sac import CriticConfig, ExplorationConfig, NetworkConfig, OptimiserConfig, SACConfig
from robot_rl.hil.learner import HILLearner, LearnerConfig, LocalLink, check_transitions

OBS, ACT = 3, 2


pytestmark = pytest.mark.usefixtures("one_thread")


def config(**kw) -> LearnerConfig:
    sac = kw.pop("sac", SACConfig(network=NetworkConfig(hidden_dims=[32, 32]),
                                  optimiser=OptimiserConfig(batch_size=16)))
    base = {"obs_dim": OBS, "action_dim": ACT, "capacity": 1000, "prior_capacity": 500, "learning_starts": 4}
    return LearnerConfig(sac=sac, **{**base, **kw})


def chunk(n: int, start: int = 0, intervention=None, obs_value: float | None = None) -> dict[str, np.ndarray]:
    """n consecutive steps; obs[:, 0] holds the global step index so rows can be traced into the buffers."""
    rng = np.random.default_rng(start)
    obs = rng.normal(size=(n, OBS)).astype(np.float32)
    obs[:, 0] = np.arange(start, start + n)
    if obs_value is not None:
        obs[:] = obs_value
    return {
        "obs": obs,
        "action": rng.uniform(-1, 1, size=(n, ACT)).astype(np.float32),
        "reward": rng.normal(size=n).astype(np.float32),
        "next_obs": obs + 0.5,
        "terminated": np.zeros(n, bool),
        "truncated": np.zeros(n, bool),
        "intervention": np.zeros(n, bool) if intervention is None else np.asarray(intervention, bool),
    }


def stored_steps(buffer) -> list[int]:
    return buffer.obs["state"][: len(buffer), 0, 0].long().tolist()


# ------------------------------------------------------------------------------------------------ validation


def _missing(c):
    del c["reward"]


def _unknown(c):
    c["rewards"] = c["reward"]


def _float64(c):
    c["obs"] = c["obs"].astype(np.float64)


def _int_flag(c):
    c["terminated"] = c["terminated"].astype(np.int64)


def _width(c):
    c["action"] = np.zeros((5, ACT + 1), np.float32)


def _length(c):
    c["next_obs"] = c["next_obs"][:4]


def _nan(c):
    c["reward"][2] = np.nan


def _list(c):
    c["intervention"] = c["intervention"].tolist()


def _ndim(c):
    c["reward"] = c["reward"][:, None]


@pytest.mark.parametrize(
    ("corrupt", "key"),
    [
        (_missing, "reward"),
        (_unknown, "rewards"),
        (_float64, "obs"),
        (_int_flag, "terminated"),
        (_width, "action"),
        (_length, "next_obs"),
        (_nan, "reward"),
        (_list, "intervention"),
        (_ndim, "reward"),
    ],
)
def test_add_rejects_a_bad_chunk_naming_the_key(corrupt, key: str) -> None:
    learner = HILLearner(config())
    c = chunk(5)
    corrupt(c)
    with pytest.raises(ValueError, match=f"'{key}'"):
        learner.add(c)
    assert len(learner.online) == len(learner.prior) == learner.transitions == 0


def test_structure_check_without_dimensions() -> None:
    assert check_transitions(chunk(7)) == 7
    c = chunk(5)
    c["next_obs"] = np.zeros((5, OBS + 1), np.float32)
    with pytest.raises(ValueError, match="'next_obs'"):
        check_transitions(c)  # obs and next_obs widths must agree even when the learner's dims are unknown


def test_config_validation_names_the_field() -> None:
    with pytest.raises(ValueError, match="prior_fraction"):
        config(prior_fraction=1.0).validate()
    with pytest.raises(ValueError, match="utd"):
        config(utd=0.0).validate()


# --------------------------------------------------------------------------------------------------- routing


def test_intervention_rows_go_to_both_buffers_the_rest_only_online() -> None:
    learner = HILLearner(config())
    first = chunk(6, start=0, intervention=[0, 1, 1, 0, 0, 1])
    second = chunk(4, start=6, intervention=[1, 0, 0, 0])
    second["terminated"][3] = True
    originals = {k: v.copy() for k, v in first.items()}
    learner.add(first)
    learner.add(second)

    assert stored_steps(learner.online) == list(range(10))
    assert stored_steps(learner.prior) == [1, 2, 5, 6]
    expected_actions = np.concatenate([first["action"][[1, 2, 5]], second["action"][[0]]])
    torch.testing.assert_close(learner.prior.action[:4, 0], torch.from_numpy(expected_actions))
    assert (learner.transitions, learner.interventions, learner.episodes) == (10, 4, 1)
    # n-step windows must not bridge chunks or the autonomous gaps between interventions: each stored run ends
    # truncated (or terminated), the caller's arrays stay untouched.
    assert learner.online.truncated[:10, 0].tolist() == [False] * 5 + [True] + [False] * 4
    assert learner.online.terminated[:10, 0].tolist() == [False] * 9 + [True]
    assert learner.prior.truncated[:4, 0].tolist() == [False, True, True, True]
    for k, v in originals.items():
        np.testing.assert_array_equal(first[k], v)


MIRROR = {"mirror_state_sign": [1.0, -1.0, -1.0], "mirror_action_sign": [-1.0, 1.0]}  # column 0: the step index


def test_mirror_online_stores_each_run_then_its_reflection_cut_apart() -> None:
    learner = HILLearner(config(mirror_online=True, **MIRROR))
    first = chunk(5, start=0, intervention=[0, 1, 1, 0, 0])
    second = chunk(3, start=5)
    second["terminated"][2] = True
    learner.add(first)
    learner.add(second)

    assert stored_steps(learner.online) == [0, 1, 2, 3, 4] * 2 + [5, 6, 7] * 2
    assert stored_steps(learner.prior) == [1, 2, 1, 2]
    state_sign, action_sign = (torch.tensor(MIRROR[k]) for k in ("mirror_state_sign", "mirror_action_sign"))
    torch.testing.assert_close(learner.online.obs["state"][5:10, 0], torch.from_numpy(first["obs"]) * state_sign)
    torch.testing.assert_close(learner.online.action[5:10, 0], torch.from_numpy(first["action"]) * action_sign)
    torch.testing.assert_close(learner.online.reward[5:10, 0], torch.from_numpy(first["reward"]))
    torch.testing.assert_close(learner.prior.action[2:4, 0], torch.from_numpy(first["action"][[1, 2]]) * action_sign)
    # each copy ends cut (truncated, or terminated where the episode ended): no n-step window joins an episode to
    # its mirror image
    assert learner.online.truncated[:16, 0].tolist() == ([False] * 4 + [True]) * 2 + [False] * 6
    assert learner.online.terminated[:16, 0].tolist() == [False] * 12 + [True] + [False] * 2 + [True]
    assert learner.prior.truncated[:4, 0].tolist() == [False, True, False, True]
    # the reflections are extra data, not received transitions: counters and earned updates are as without them
    assert (learner.transitions, learner.interventions, learner.episodes) == (8, 2, 1)
    assert learner.pending_updates == HILLearner(config()).pending_updates + 4  # 8 received, learning_starts 4


def test_mirror_demos_adds_the_demos_reflections_and_bad_mirror_settings_name_the_field() -> None:
    learner = HILLearner(config(mirror_demos=True, **MIRROR))
    demo = chunk(3, start=0)
    learner.add_prior(demo)
    assert stored_steps(learner.prior) == [0, 1, 2, 0, 1, 2] and learner.demo_transitions == 6
    torch.testing.assert_close(learner.prior.next_obs["state"][3:6, 0],
                               torch.from_numpy(demo["next_obs"]) * torch.tensor(MIRROR["mirror_state_sign"]))
    learner.add(chunk(2, start=3))  # mirror_online off: received transitions are stored once
    assert stored_steps(learner.online) == [3, 4]
    for bad, field in [({"mirror_demos": True}, "declares no symmetry"),
                       ({**MIRROR, "mirror_state_sign": [1.0, -1.0]}, "mirror_state_sign"),
                       ({**MIRROR, "mirror_action_sign": [0.5, 1.0]}, "must be \\+1 or -1"),
                       ({"mirror_action_sign": [1.0, 1.0]}, "mirror_action_sign")]:
        with pytest.raises(ValueError, match=field):
            config(**bad).validate()


def test_rlpd_batches_mix_in_the_configured_fraction() -> None:
    sac = SACConfig(network=NetworkConfig(hidden_dims=[32, 32]), optimiser=OptimiserConfig(batch_size=20, utd=3))
    learner = HILLearner(config(sac=sac, prior_fraction=0.25))
    learner.add(chunk(50, obs_value=1.0))
    online_only = learner.sample()
    assert online_only.obs["state"].shape == (3, 20, OBS)
    assert (online_only.obs["state"] == 1.0).all()  # no prior data yet: all online

    learner.add_prior(chunk(30, obs_value=-1.0))
    batch = learner.sample()
    assert batch.obs["state"].shape == (3, 20, OBS)
    from_prior = (batch.obs["state"][..., 0] == -1.0).sum(dim=1)
    assert from_prior.tolist() == [5, 5, 5]  # round(20 * 0.25) rows of every one of the utd minibatches

    learner_no_mix = HILLearner(config(sac=sac, prior_fraction=0.0))
    learner_no_mix.add(chunk(50, obs_value=1.0))
    learner_no_mix.add_prior(chunk(30, obs_value=-1.0))
    assert (learner_no_mix.sample().obs["state"] == 1.0).all()


# --------------------------------------------------------------------------------- schedule, version, weights


def test_updates_follow_utd_after_learning_starts_and_bump_the_version() -> None:
    learner = HILLearner(config(learning_starts=10, utd=0.5))
    link = LocalLink(learner)
    assert link.poll_weights() is not None  # the initial weights, once
    assert link.poll_weights() is None

    link.push(chunk(8))
    assert (learner.updates, learner.version) == (0, 0)
    assert learner.train(5) == {}  # nothing before learning_starts
    assert link.poll_weights() is None

    link.push(chunk(8, start=8))  # 16 received, 6 of them past learning_starts: 0.5 * 6 = 3 updates
    assert (learner.updates, learner.version) == (3, 1)
    metrics = link.take_metrics()
    assert set(metrics) >= {"critic_loss", "actor_loss", "q_mean"}
    assert all(np.isfinite(v) for v in metrics.values())
    assert link.take_metrics() == {}  # taken: the next episode's mean starts empty
    assert link.poll_weights() is not None
    assert link.poll_weights() is None

    link.push(chunk(3, start=16))  # 1.5 more owed: 1 now, the half carries over
    assert learner.updates == 4
    link.push(chunk(1, start=19))
    assert learner.updates == 5
    assert link.alive and link.stats()["transitions"] == 20


def test_actor_state_loads_into_a_fresh_actor_and_is_a_copy() -> None:
    cfg = config()
    learner = HILLearner(cfg)
    learner.add(chunk(20))
    learner.train(3)
    state = learner.actor_state()
    assert all(v.device.type == "cpu" for v in state.values())

    actor = TanhGaussianActor(OBS, ACT, cfg.sac.network.hidden_dims, cfg.sac.network.actor_layer_norm)
    actor.load_state_dict(state)
    obs = torch.randn(8, OBS)
    expected = learner.agent.act({"state": obs}, deterministic=True)
    with torch.no_grad():
        torch.testing.assert_close(actor(obs, deterministic=True)[0], expected)

    for v in state.values():
        v.zero_()
    torch.testing.assert_close(learner.agent.act({"state": obs}, deterministic=True), expected)


def test_state_dict_round_trip_restores_agent_buffers_counters_and_sampling() -> None:
    cfg = config()
    a = HILLearner(cfg)
    a.add(chunk(30, intervention=np.arange(30) % 4 == 0))
    a.add_prior(chunk(5, start=100))
    a.train(4)
    buf = io.BytesIO()
    torch.save(a.state_dict(), buf)
    buf.seek(0)

    b = HILLearner(config(seed=1))  # different initial weights and sampling seed: all must come from the state
    b.load_state_dict(torch.load(buf, weights_only=False))
    ca, cb = a.counters(), b.counters()
    assert cb.pop("version") > ca.pop("version")  # the weights changed, so actors must re-fetch them
    assert ca == cb
    assert stored_steps(b.online) == stored_steps(a.online) and stored_steps(b.prior) == stored_steps(a.prior)
    for k, v in a.actor_state().items():
        torch.testing.assert_close(b.actor_state()[k], v)
    torch.testing.assert_close(b.sample().obs["state"], a.sample().obs["state"])

    wrong = HILLearner(config(obs_dim=OBS + 1))
    with pytest.raises((RuntimeError, ValueError)):
        wrong.load_state_dict(a.state_dict())


def test_demo_dataset_prefills_the_prior_buffer(tmp_path: Path) -> None:
    from robot_rl.datasets import DatasetWriter, transition_features

    root = tmp_path / "demos"
    writer = DatasetWriter(root, fps=10, features=transition_features(OBS, ACT), task="reach")
    for ep, length in enumerate([4, 6]):
        c = chunk(length, start=10 * ep)
        last = np.arange(length) == length - 1
        writer.write_episode(
            {
                "observation.state": c["obs"],
                "action": c["action"],
                "next.reward": c["reward"],
                "next.done": last,
                "next.terminated": last,
                "next.truncated": np.zeros(length, bool),
                "next.success": last,
                "next.observation.state": c["next_obs"],
                "intervention": np.zeros(length, bool),
            }
        )
    writer.close()

    learner = HILLearner(config(demo_path=str(root)))
    assert stored_steps(learner.prior) == [0, 1, 2, 3, 10, 11, 12, 13, 14, 15]
    assert (len(learner.online), learner.demo_transitions, learner.transitions) == (0, 10, 0)
    assert len(HILLearner(config(demo_path=str(root), demo_max_episodes=1)).prior) == 4
    with pytest.raises(ValueError, match="prior_capacity"):
        HILLearner(config(demo_path=str(root), prior_capacity=8))
    mirrored = HILLearner(config(demo_path=str(root), mirror_demos=True, **MIRROR))
    assert stored_steps(mirrored.prior) == [0, 1, 2, 3, 10, 11, 12, 13, 14, 15] * 2
    assert mirrored.prior.action[10, 0].tolist() == (mirrored.prior.action[0, 0] * torch.tensor([-1.0, 1.0])).tolist()
    with pytest.raises(ValueError, match="with their mirror images but prior_capacity"):
        HILLearner(config(demo_path=str(root), prior_capacity=12, mirror_demos=True, **MIRROR))


# ------------------------------------------------------------------------------------------------- learning


def test_learns_the_best_action_of_a_one_step_toy_task() -> None:
    """Bandit-like: every step ends the episode and the reward peaks at a = 0.5, so Q(s, a) is the reward."""
    sac = SACConfig(network=NetworkConfig(hidden_dims=[32, 32]),
                    optimiser=OptimiserConfig(batch_size=64, actor_lr=1e-3, critic_lr=1e-3),
                    exploration=ExplorationConfig(init_temperature=0.01))
    learner = HILLearner(LearnerConfig(obs_dim=1, action_dim=1, sac=sac, learning_starts=0, seed=3))
    rng = np.random.default_rng(0)
    n = 512
    action = rng.uniform(-1, 1, size=(n, 1)).astype(np.float32)
    learner.add(
        {
            "obs": np.zeros((n, 1), np.float32),
            "action": action,
            "reward": (1.0 - 4.0 * (action[:, 0] - 0.5) ** 2).astype(np.float32),
            "next_obs": np.zeros((n, 1), np.float32),
            "terminated": np.ones(n, bool),
            "truncated": np.zeros(n, bool),
            "intervention": np.zeros(n, bool),
        }
    )
    with torch.random.fork_rng():
        torch.manual_seed(0)
        learner.train(300)
    s = torch.zeros(3, 1)
    with torch.no_grad():
        q = learner.agent.critic(s, torch.tensor([[-0.5], [0.5], [1.0]])).mean(0)
    assert q[1] > q[0] + 1.0 and q[1] > q[2] + 0.3  # true values: -3, 1, 0
    best = learner.agent.act({"state": s[:1]}, deterministic=True).item()
    assert abs(best - 0.5) < 0.2


# ------------------------------------------------------------------------------ the learner service, without Ray


def test_learner_actor_trains_in_the_background_checkpoints_and_resumes(tmp_path: Path) -> None:
    """LearnerActor is the body of the Ray actor; as a plain object it shows the service logic without Ray."""
    import time

    from robot_rl.hil.distributed import CHECKPOINT_FILE, LearnerActor

    cfg = config(learning_starts=4, utd=1.0)
    service = LearnerActor(cfg, tmp_path, checkpoint_every_s=1000.0, train_slice=2)
    try:
        version0, weights0 = service.get_weights(-1)
        assert service.get_weights(version0) is None
        assert all(isinstance(v, np.ndarray) for v in weights0.values())  # cheap to ship through Ray
        with pytest.raises(ValueError, match="'obs'"):
            service.add(chunk(3) | {"obs": np.zeros((3, OBS + 1), np.float32)})
        for i in range(4):
            service.add(chunk(5, start=5 * i))  # returns at once; the thread stores and trains
        deadline = time.monotonic() + 20.0
        while (s := service.stats())["updates"] < 16 or s["queued_chunks"]:  # 20 received - 4 warm-up, utd 1
            assert time.monotonic() < deadline, s
            time.sleep(0.01)
        assert s["training"] and s["train_error"] is None and s["transitions"] == 20
        version, weights = service.get_weights(version0)
        assert version > version0 and any(not np.array_equal(weights[k], weights0[k]) for k in weights)
        assert service.save() == str(tmp_path / CHECKPOINT_FILE)
        final = service.stop(save=False)
    finally:
        service.stop(save=False)

    resumed = LearnerActor(cfg, tmp_path, checkpoint_every_s=1000.0)
    try:
        s = resumed.stats()
        assert s["restored"] and s["transitions"] == 20 and s["updates"] == final["updates"]
        assert s["version"] > final["version"]  # actors holding the old weights fetch these
    finally:
        resumed.stop(save=False)


def test_importing_the_ray_link_does_not_import_ray() -> None:
    import subprocess
    import sys

    code = "import sys, robot_rl.hil.distributed; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])


def test_a_chunk_being_stored_still_counts_as_queued(tmp_path: Path) -> None:
    """Regression: the training thread popped a chunk before storing it, so for a moment stats() showed neither
    a queued chunk nor its transitions, and a waiter that saw an empty queue read a short transition count."""
    import threading
    import time

    from robot_rl.hil.distributed import LearnerActor

    service = LearnerActor(config(), tmp_path, checkpoint_every_s=1000.0)
    inside, release = threading.Event(), threading.Event()
    real_add = service.learner.add

    def slow_add(transitions):
        inside.set()
        release.wait(10.0)
        real_add(transitions)

    service.learner.add = slow_add
    try:
        service.add(chunk(3))
        assert inside.wait(10.0)
        s = service.stats()
        assert s["queued_chunks"] == 1 and s["transitions"] == 0
        release.set()
        deadline = time.monotonic() + 10.0
        while (s := service.stats())["queued_chunks"]:
            assert time.monotonic() < deadline, s
            time.sleep(0.01)
        assert s["transitions"] == 3
    finally:
        release.set()
        service.stop(save=False)


def test_deploy_loads_a_checkpoint_of_the_default_train_agent(tmp_path: Path) -> None:
    """`robot-rl train` saves the default agent (agent=simba); `deploy` must rebuild that actor, not an MLP one."""
    from dataclasses import asdict

    import gymnasium as gym

    from robot_rl import checkpoint
    from robot_rl.agents.sac import SAC
    from robot_rl.api import Agent
    from robot_rl.config import compose_train_config

    cfg = compose_train_config(["env.spec=gym:Pendulum-v1", "agent.network.critic_width=32",
                                "agent.network.actor_width=32"])
    agent = SAC(3, 1, cfg.agent)  # Pendulum's sizes: the loader takes them from the run's env
    agent.observe({"state": torch.randn(32, 3) + 2}, torch.randn(32), torch.zeros(32, dtype=torch.bool))
    path = tmp_path / "latest.pt"
    checkpoint.atomic_save({"format": 1, "agent": agent.state_dict(), "config": asdict(cfg)}, path)
    loaded = Agent.load(path, action_space=gym.spaces.Box(-1.0, 1.0, (1,)))  # deploy's call: bridge units
    obs = torch.randn(5, 3) + 2
    with torch.no_grad():
        expected = agent.act({"state": obs}, deterministic=True).numpy()
    np.testing.assert_allclose(loaded.predict(obs.numpy()), expected, rtol=0, atol=1e-6)


def test_hil_learner_runs_the_default_agent_and_its_actor_state_loads_for_acting() -> None:
    from robot_rl.agents.sac import build_actor

    sac = SACConfig(network=NetworkConfig(kind="hyper", critic_width=32, actor_width=16, obs_norm=True),
                    critic=CriticConfig(num_atoms=21, reward_scale=True),
                    optimiser=OptimiserConfig(batch_size=16))
    learner = HILLearner(config(sac=sac))
    learner.add(chunk(40, intervention=np.arange(40) % 5 == 0))
    assert learner.agent.obs_norm.count.item() == 40  # every received row updates the statistics
    metrics = learner.train(3)
    assert metrics and all(np.isfinite(v) for v in metrics.values())
    actor = build_actor(OBS, ACT, sac)
    actor.load_state_dict(learner.actor_state())
    obs = torch.randn(4, OBS)
    with torch.no_grad():
        torch.testing.assert_close(actor(obs, deterministic=True)[0], learner.agent.act({"state": obs}, deterministic=True))


