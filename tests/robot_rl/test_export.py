"""`robot-rl export`: every kind of run becomes a policy directory (and an ONNX graph) that acts exactly as the
run's own acting code on the same observations; `eval policy=` and `Agent.load` take the result; the command's
mistakes end in one line and overwrite nothing."""

from dataclasses import asdict
from pathlib import Path

import gymnasium as gym
import numpy as np
import onnxruntime as ort
import pytest
import torch
from robot_rl.policies import (
    ActorPolicy,
    DiffusionPolicy,
    FlowPolicy,
    MLPPolicy,
    NoiseSteeredPolicy,
    ResidualPolicy,
)
from robot_rl.policies.composed import base_spec
from robot_rl.policies.io import CONFIG, load_policy, read_metadata, save_policy
from robot_rl.policies.onnx import ONNX_FILE

from robot_rl import checkpoint
from robot_rl.agents.sac import SAC, CriticConfig, EncoderConfig, NetworkConfig, OptimiserConfig, SACConfig
from robot_rl.api import Agent
from robot_rl.cli import main
from robot_rl.config import compose_train_config
from robot_rl.export import export
from robot_rl.finetune.config import FinetuneConfig
from robot_rl.runner import CHECKPOINT_FORMAT
from tests.policies.briefly_trained import briefly_trained
from tests.robot_rl.finetune.scripted_env import ScriptedEnv

OBS, A, H = 3, 2, 4  # the scripted env's sizes
SAC_CFG = SACConfig(network=NetworkConfig(hidden_dims=[32, 32], obs_norm=True),
                    critic=CriticConfig(n_step=1),
                    optimiser=OptimiserConfig(batch_size=8))


pytestmark = pytest.mark.usefixtures("one_thread")


def write_run(run: Path, config, state: dict, name: str = "best.pt") -> Path:
    """A run directory as the runner leaves it: config.yaml and a checkpoint with the run's config inside."""
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("# written by the test\n")
    checkpoint.atomic_save({"format": CHECKPOINT_FORMAT, "config": asdict(config), **state, "env_steps": 40},
                           run / "checkpoints" / name)
    return run


def randomize(module: torch.nn.Module, scale: float = 0.3) -> None:
    """Weights away from the zero-mean start of residual RL and DSRL (or from the BC weights a chain starts
    at), so a wrong composition would show. Chains get a fine-tuning-sized step: a 20-step DDIM chain
    amplifies float32 rounding (torch and onnxruntime round differently) with the size of its weights."""
    torch.manual_seed(3)
    with torch.no_grad():
        for p in module.parameters():
            p.add_(torch.randn_like(p) * scale)


def base_dir(tmp_path: Path, policy) -> Path:
    """A briefly trained BC policy (normalisers fitted, 150 steps on a smooth obs -> chunk map), saved: an
    untrained diffusion policy's chunks all sit on its clip bounds, which would hide a wrong network."""
    torch.manual_seed(0)
    return save_policy(briefly_trained(policy, obs_scale=2.0), tmp_path / "base")


def inside_clip(policy, chunk: torch.Tensor) -> float:
    """Share of a chunk's values strictly inside the sampler's clip bounds (normalised space)."""
    return float((policy.action_norm.normalize(chunk).abs() < 0.999).float().mean())


def onnx_session(out: Path) -> ort.InferenceSession:
    return ort.InferenceSession(str(out / ONNX_FILE), providers=["CPUExecutionProvider"])


# -- SAC: plain and the default agent --------------------------------------------------------------------------
@pytest.mark.parametrize("agent", ["simba", "sac"])
def test_sac_run_exports_its_deterministic_actor_with_observation_statistics(tmp_path, capsys, agent):
    cfg = compose_train_config(["env.spec=gym:Pendulum-v1", f"agent={agent}", "agent.network.obs_norm=true"])
    torch.manual_seed(0)
    sac = SAC(3, 1, cfg.agent)
    sac.observe({"state": torch.randn(64, 3) * 4 + 2}, torch.zeros(64), torch.zeros(64, dtype=torch.bool))
    run = write_run(tmp_path / "run", cfg, {"agent": sac.state_dict()})
    out = tmp_path / "exported"
    assert main(["export", f"run={run}", f"out={out}", "format=onnx"]) == 0
    assert "exported" in capsys.readouterr().out

    policy = load_policy(out)
    assert isinstance(policy, ActorPolicy) and policy.config()["network"] == ("hyper" if agent == "simba" else "mlp")
    obs = torch.randn(16, 3) * 4 + 2
    expected = sac.act({"state": obs}, deterministic=True)
    torch.testing.assert_close(policy.act({"state": obs}, deterministic=True), expected, rtol=0, atol=0)
    (got,) = onnx_session(out).run(None, {"obs": obs.numpy()})
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-5)
    meta = read_metadata(out)
    assert meta["kind"] == "sac" and meta["env_spec"] == "gym:Pendulum-v1" and meta["env_steps"] == 40
    assert [s["name"] for s in meta["onnx"]["inputs"]] == ["obs"] and meta["onnx"]["outputs"][0]["name"] == "action"
    assert meta["onnx"]["execute"] == 1 and meta["onnx"]["inputs"][0]["shape"] == ["N", 3]

    agent_ = Agent.load(out)  # what deploy does with a directory
    np.testing.assert_allclose(agent_.predict(obs[0].numpy()), expected[0].numpy(), rtol=0, atol=1e-6)
    assert main(["eval", f"policy={out}", "env.spec=gym:Pendulum-v1", "episodes=1"]) == 0
    assert "return" in capsys.readouterr().out


# -- residual RL and DSRL: base + learned actor ------------------------------------------------------------------
def test_residual_run_exports_base_plus_correction_as_its_evaluation_acts(tmp_path):
    from robot_rl.finetune.residual import ResidualConfig, ResidualRL

    base = base_dir(tmp_path, MLPPolicy(OBS, A, horizon=H, execute=2, hidden=[16]))
    cfg = FinetuneConfig(method="residual", base_policy=str(base), agent=SAC_CFG, residual=ResidualConfig(scale=0.3))
    env = ScriptedEnv([5, 7], [True, False])
    method = ResidualRL(cfg.residual, cfg.agent, load_policy(base), env, capacity=64)
    randomize(method.agent.actor)
    method.agent.observe({"state": torch.randn(32, OBS + A) * 3}, torch.zeros(32), torch.zeros(32, dtype=torch.bool))
    run = write_run(tmp_path / "run", cfg, {k: v for k, v in method.state_dict().items() if k != "replay"})
    out = export(run, tmp_path / "exported", onnx=True)

    policy = load_policy(out)
    assert isinstance(policy, ResidualPolicy) and read_metadata(out)["kind"] == "residual"
    session = onnx_session(out)
    queue, pos = np.zeros((2, H, A), np.float32), np.full(2, policy.execute, np.int64)
    act, on_done = method.eval_policy()
    obs = env.reset()
    for _ in range(9):  # across chunk boundaries and both envs' episode ends
        expected = act(obs)
        torch.testing.assert_close(policy.act(obs, deterministic=True), expected, rtol=0, atol=0)
        got, queue, pos = session.run(None, {"obs": obs["state"].numpy(), "queue": queue, "pos": pos})
        np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-5)
        obs, _, terminated, truncated, _ = env.step(expected)
        done = terminated | truncated
        on_done(done)
        policy.reset(done)
        pos[done.numpy()] = policy.execute
    assert not torch.equal(expected, method.eval_base.act(obs["state"], True))  # the correction is not zero

    box = gym.spaces.Box(-1.0, 1.0, (A,))  # the scripted env is not the config's env.spec
    agent = Agent.load(run, action_space=box)  # the run itself (no export step) acts the same
    obs = env.reset()
    expected = load_policy(out).act(obs, deterministic=True).numpy()
    np.testing.assert_allclose(agent.predict(obs["state"].numpy()), expected, rtol=0, atol=1e-6)


@pytest.mark.parametrize("base_kind", ["flow", "diffusion"])
def test_dsrl_run_exports_the_noise_actor_through_its_base(tmp_path, base_kind):
    from robot_rl.finetune.dsrl import DSRL

    make = FlowPolicy if base_kind == "flow" else DiffusionPolicy
    base = base_dir(tmp_path, make(OBS, A, horizon=H, execute=3, hidden=[16], num_inference_steps=3))
    cfg = FinetuneConfig(method="dsrl", base_policy=str(base), agent=SAC_CFG)
    env = ScriptedEnv([5, 7], [True, False])
    method = DSRL(cfg.dsrl, cfg.agent, load_policy(base), env, capacity=64)
    randomize(method.agent.actor)
    run = write_run(tmp_path / "run", cfg, {k: v for k, v in method.state_dict().items() if k != "replay"},
                    name="latest.pt")
    out = export(run, tmp_path / "exported", onnx=True)

    policy = load_policy(out)
    assert isinstance(policy, NoiseSteeredPolicy)
    session = onnx_session(out)
    act, on_done = method.eval_policy()
    obs = env.reset()
    for _ in range(8):
        expected = act(obs)
        torch.testing.assert_close(policy.act(obs, deterministic=True), expected, rtol=0, atol=0)
        obs, _, terminated, truncated, _ = env.step(expected)
        on_done(terminated | truncated)
        policy.reset(terminated | truncated)
    state = obs["state"]
    (chunk,) = session.run(None, {"obs": state.numpy(), "noise": np.zeros((2, H, A), np.float32)})
    expected = method.denoise(state, method.agent.act({"state": state}, deterministic=True))
    np.testing.assert_allclose(chunk, expected.numpy(), rtol=0, atol=1e-5)
    assert inside_clip(policy.base, expected) > 0.5


# -- ReinFlow and DPPO: the fine-tuned flow or diffusion policy --------------------------------------------------
def test_reinflow_run_exports_the_fine_tuned_flow(tmp_path):
    from robot_rl.finetune.reinflow import ReinFlowChain

    base = base_dir(tmp_path, FlowPolicy(OBS, A, horizon=H, hidden=[16]))
    cfg = FinetuneConfig(method="reinflow", base_policy=str(base))
    r = cfg.reinflow
    chain = ReinFlowChain(load_policy(base), r.num_steps, r.min_std, r.max_std, tuple(r.noise_hidden))
    randomize(chain.policy.net, 0.05)
    run = write_run(tmp_path / "run", cfg, {"policy": chain.state_dict()})
    out = export(run, tmp_path / "exported", onnx=True)

    policy = load_policy(out)
    assert isinstance(policy, FlowPolicy) and read_metadata(out)["kind"] == "reinflow"
    obs = torch.randn(5, OBS)
    expected = chain.sample(obs, deterministic=True).chunk
    assert not torch.equal(expected, load_policy(base).predict_chunk(obs, deterministic=True))  # fine-tuned
    assert inside_clip(policy, expected) > 0.5
    torch.testing.assert_close(policy.predict_chunk(obs, deterministic=True), expected, rtol=0, atol=0)
    (got,) = onnx_session(out).run(None, {"obs": obs.numpy(), "noise": np.zeros((5, H, A), np.float32)})
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-5)


def test_dppo_run_exports_the_fine_tuned_diffusion_and_refuses_frozen_steps(tmp_path, capsys):
    from robot_rl.finetune.config import DPPOConfig
    from robot_rl.finetune.dppo import DPPOChain

    base = base_dir(tmp_path, DiffusionPolicy(OBS, A, horizon=H, hidden=[16], num_train_steps=20,
                                              num_inference_steps=3))
    cfg = FinetuneConfig(method="dppo", base_policy=str(base), dppo=DPPOConfig(ft_steps=3))
    chain = DPPOChain(load_policy(base), 3)
    randomize(chain.policy.net, 0.05)
    run = write_run(tmp_path / "run", cfg, {"policy": chain.state_dict()})
    assert main(["export", f"run={run}", f"out={tmp_path / 'exported'}", "format=onnx"]) == 0
    policy = load_policy(tmp_path / "exported")
    obs = torch.randn(5, OBS)
    expected = chain.sample(obs, deterministic=True).chunk
    assert not torch.equal(expected, load_policy(base).predict_chunk(obs, deterministic=True))  # fine-tuned
    assert inside_clip(policy, expected) > 0.5
    torch.testing.assert_close(policy.predict_chunk(obs, deterministic=True), expected, rtol=0, atol=0)
    (got,) = onnx_session(tmp_path / "exported").run(
        None, {"obs": obs.numpy(), "noise": np.zeros((5, H, A), np.float32)})
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-5)

    frozen = FinetuneConfig(method="dppo", base_policy=str(base), dppo=DPPOConfig(ft_steps=1))
    run = write_run(tmp_path / "frozen", frozen, {"policy": DPPOChain(load_policy(base), 1).state_dict()})
    capsys.readouterr()
    assert main(["export", f"run={run}", f"out={tmp_path / 'x'}"]) == 2
    err = capsys.readouterr().err
    assert "ft_steps=1 < 3 DDIM steps" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()


# -- policy directories in, policy directories out ---------------------------------------------------------------
def test_a_bc_run_exports_its_policy_and_a_re_export_replaces_only_a_policy(tmp_path):
    policy = MLPPolicy(OBS, A, horizon=H, hidden=[16])
    bc_run = tmp_path / "bc"
    bc_run.mkdir()
    base_dir(tmp_path, policy).rename(bc_run / "policy")  # where robot-rl bc writes it
    out = export(bc_run, tmp_path / "exported", onnx=True)
    onnx = read_metadata(out)["onnx"]
    assert (out / ONNX_FILE).is_file() and onnx["outputs"][0]["name"] == "action_chunk" and onnx["execute"] == H
    assert read_metadata(out)["exported_from"] == str(bc_run / "policy")
    export(out, out)  # in place, without onnx: the stale graph and its description go
    assert not (out / ONNX_FILE).exists() and "onnx" not in read_metadata(out)
    obs = torch.randn(3, OBS)
    torch.testing.assert_close(load_policy(out).predict_chunk(obs, deterministic=True),
                               policy.predict_chunk(obs, deterministic=True), rtol=0, atol=0)


# -- mistakes: one line, nothing overwritten -------------------------------------------------------------------
def _error(capsys, args: list[str]) -> str:
    assert main(["export", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_export_mistakes_are_one_line(tmp_path, capsys, monkeypatch):
    policy_dir = base_dir(tmp_path, MLPPolicy(OBS, A, horizon=H, hidden=[16]))
    assert "run not found: " in _error(capsys, [f"run={tmp_path / 'nope'}", f"out={tmp_path / 'o'}"])
    (tmp_path / "fresh").mkdir()
    (tmp_path / "fresh" / "config.yaml").write_text("seed: 0\n")
    assert "has no checkpoint yet" in _error(capsys, [f"run={tmp_path / 'fresh'}", f"out={tmp_path / 'o'}"])
    (tmp_path / "empty").mkdir()
    assert "neither a run directory" in _error(capsys, [f"run={tmp_path / 'empty'}", f"out={tmp_path / 'o'}"])

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "todo.txt").write_text("mine")
    assert "exists and is not a policy directory" in _error(capsys, [f"run={policy_dir}", f"out={notes}"])
    assert (notes / "todo.txt").read_text() == "mine" and not (notes / CONFIG).exists()

    monkeypatch.setattr("robot_rl.export._installed", lambda name: name != "onnxruntime")
    err = _error(capsys, [f"run={policy_dir}", f"out={tmp_path / 'o'}", "format=onnx"])
    assert "needs onnxruntime" in err and "robot-rl[export]" in err and not (tmp_path / "o").exists()

    assert "unknown key 'outdir' for export" in _error(capsys, [f"run={policy_dir}", "outdir=x"])
    assert "format must be one of policy, onnx" in _error(capsys, [f"run={policy_dir}", "out=o", "format=tflite"])
    assert "export needs run=" in _error(capsys, [f"run={policy_dir}"])


def test_checkpoints_that_do_not_fit_are_one_line(tmp_path, capsys):
    cfg = compose_train_config(["env.spec=gym:Pendulum-v1", "agent=sac"])
    sac = SAC(3, 1, cfg.agent)
    cfg.agent.network.hidden_dims = [8]  # the checkpoint's config no longer describes its weights
    run = write_run(tmp_path / "run", cfg, {"agent": sac.state_dict()})
    assert "weights do not fit the run's config" in _error(capsys, [f"run={run}", f"out={tmp_path / 'o'}"])
    run = write_run(tmp_path / "other", cfg, {"something": 1})
    assert "not a robot-rl training checkpoint" in _error(capsys, [f"run={run}", f"out={tmp_path / 'o'}"])


def test_export_help_lists_the_keys(capsys):
    assert main(["export", "--help"]) == 0
    text = capsys.readouterr().out
    assert "format=policy" in text and "run=" in text and "out=" in text


def test_a_hil_learner_checkpoint_exports_with_its_own_sizes(tmp_path):
    """hil-train's learner.pt names its sizes (no env to build) and its agent config `sac`."""
    torch.manual_seed(0)
    sac = SAC(OBS, A, SAC_CFG)
    path = tmp_path / "learner.pt"
    checkpoint.atomic_save({"format": 1, "config": {"sac": asdict(SAC_CFG), "obs_dim": OBS, "action_dim": A},
                            "agent": sac.state_dict()}, path)
    out = export(path, tmp_path / "exported")
    obs = torch.randn(4, OBS)
    torch.testing.assert_close(load_policy(out).act(obs, deterministic=True),
                               sac.act({"state": obs}, deterministic=True), rtol=0, atol=0)


def test_a_residual_policy_whose_base_samples_has_a_directory_but_no_graph(tmp_path, capsys):
    base = MLPPolicy(OBS, A, horizon=H, hidden=[16])
    actor = {"obs_dim": OBS + A, "action_dim": A, "hidden": [16]}
    saved = save_policy(ResidualPolicy(base_spec(base), actor, 0.1, base_deterministic=False), tmp_path / "res")
    err = _error(capsys, [f"run={saved}", f"out={tmp_path / 'o'}", "format=onnx"])
    assert "base_deterministic=false" in err and "without format=onnx" in err and not (tmp_path / "o").exists()
    assert main(["export", f"run={saved}", f"out={tmp_path / 'o'}"]) == 0
    assert isinstance(load_policy(tmp_path / "o"), ResidualPolicy)


# -- SAC from cameras: encoder, state statistics and actor in one policy ------------------------------------------
CAMERAS = {"pixels/front": [24, 24, 3], "pixels/wrist": [24, 24, 3]}


@pytest.fixture(scope="module")
def pixel_run(tmp_path_factory) -> Path:
    """A tiny `robot-rl train env.spec=arm:reach-pixels` run (24x24 frames, small encoder, obs_norm on): 20
    updates after 100 random steps, one evaluation, best.pt (a few seconds on one thread)."""
    run = tmp_path_factory.mktemp("pixels") / "run"
    before = torch.get_num_threads()
    try:
        assert main(["train", "env.spec=arm:reach-pixels", "env.pixel_size=[24,24]", "agent=sac",
                     "agent.network.obs_norm=true", "agent.network.hidden_dims=[32,32]",
                     "agent.optimiser.batch_size=16",
                     "agent.encoder.channels=4", "agent.encoder.layers=2", "agent.encoder.feature_dim=8",
                     "train.steps=120", "train.learning_starts=100", "train.eval_every=120", "env.num_eval_envs=1",
                     "train.replay_capacity=500", "train.video=false", "quiet=true", "threads=1",
                     f"run_dir={run}"]) == 0
    finally:
        torch.set_num_threads(before)
    return run


def _run_agent_and_frames(run: Path) -> tuple[SAC, dict[str, torch.Tensor]]:
    """The run's agent as `eval run=` builds it, and camera observations of 3 envs after a random step."""
    from robot_rl.config import load_run_config
    from robot_rl.trainer import build_agent, make_env

    cfg = load_run_config(run)
    with make_env(cfg, 3) as env:
        agent = build_agent(cfg, env)
        agent.load_state_dict(checkpoint.load(run / "checkpoints" / "best.pt")["agent"])
        env.reset(seed=0)
        obs, *_ = env.step(torch.rand(3, env.action_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1)
    return agent, obs


def test_a_pixel_run_exports_a_policy_that_acts_as_the_run(pixel_run, tmp_path, capsys):
    out = tmp_path / "exported"
    assert main(["export", f"run={pixel_run}", f"out={out}", "format=onnx"]) == 0
    policy = load_policy(out)
    assert isinstance(policy, ActorPolicy) and policy.cameras == CAMERAS and policy.state_norm is not None
    assert float(policy.state_norm.count) > 0  # the run's state statistics came along
    agent, obs = _run_agent_and_frames(pixel_run)
    expected = agent.act(obs, deterministic=True)
    torch.testing.assert_close(policy.act(obs, deterministic=True), expected, rtol=0, atol=0)
    flipped = {**obs, "pixels/front": obs["pixels/front"].flip(1)}  # the images matter
    assert not torch.equal(policy.act(flipped, deterministic=True), expected)

    # ONNX: the observation groups by name, images as the env gives them (uint8)
    onnx = read_metadata(out)["onnx"]
    assert [(s["name"], s["dtype"], s["shape"]) for s in onnx["inputs"]] == [
        ("state", "float32", ["N", 7]), ("pixels/front", "uint8", ["N", 24, 24, 3]),
        ("pixels/wrist", "uint8", ["N", 24, 24, 3])]
    (got,) = onnx_session(out).run(None, {s["name"]: obs[s["name"]].numpy() for s in onnx["inputs"]})
    np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=1e-5)

    # a policy directory re-exports as itself; Agent.load takes the directory and the run, one dict observation
    again = export(out, tmp_path / "again")
    torch.testing.assert_close(load_policy(again).act(obs, deterministic=True), expected, rtol=0, atol=0)
    single = {k: v[0].numpy() for k, v in obs.items()}
    for source in (out, pixel_run):
        loaded = Agent.load(source)
        assert loaded.cameras == CAMERAS
        np.testing.assert_allclose(loaded.predict(single), expected[0].numpy(), rtol=0, atol=1e-6)
    batch = Agent.load(out).predict({k: v.numpy() for k, v in obs.items()})
    np.testing.assert_allclose(batch, expected.numpy(), rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match=r"no camera group 'pixels/wrist'; this policy reads it as uint8 \[24, 24, 3\]"):
        Agent.load(out).predict({k: v for k, v in single.items() if k != "pixels/wrist"})

    # eval policy= renders the env at the policy's image size (the spec's default is 84x84)
    capsys.readouterr()
    assert main(["eval", f"policy={out}", "env.spec=arm:reach-pixels", "episodes=1"]) == 0
    assert "arm:reach-pixels" in capsys.readouterr().out
    err = _error_of(capsys, ["eval", f"policy={out}", "env.spec=arm:reach", "episodes=1"])
    assert "arm:reach has no camera group 'pixels/front'" in err and "-pixels env spec" in err


def _error_of(capsys, args: list[str]) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def test_a_pixel_learner_checkpoint_without_image_sizes_is_one_line(tmp_path, capsys):
    """hil-train's learner.pt names state sizes only; a camera encoder in it cannot be rebuilt from it."""
    cfg = SACConfig(network=NetworkConfig(hidden_dims=[16]),
                    encoder=EncoderConfig(feature_dim=8, channels=4, layers=1))
    agent = SAC(7, 4, cfg, cameras={"pixels/front": (16, 16, 3)})
    path = tmp_path / "learner.pt"
    checkpoint.atomic_save({"format": 1, "config": {"sac": asdict(cfg), "obs_dim": 7, "action_dim": 4},
                            "agent": agent.state_dict()}, path)
    assert "names no image sizes" in _error(capsys, [f"run={path}", f"out={tmp_path / 'o'}"])
    assert not (tmp_path / "o").exists()
