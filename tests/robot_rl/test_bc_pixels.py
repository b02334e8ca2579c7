"""Behaviour cloning from cameras: MLP, diffusion and flow policies conditioned on a conv encoder per camera fused
with the state (the encoder trained by the BC loss), saved and reloaded with it, `robot-rl bc` on a camera dataset
(every camera by default, `cameras=` to choose), evaluation in the -pixels task, and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from robot_rl.policies import DiffusionPolicy, FlowPolicy, MLPPolicy
from robot_rl.policies.io import load_policy, save_policy

from robot_rl.cli import main
from robot_rl.collect import CollectArgs, CollectEnvArgs, collect

CAMERAS = {"pixels/front": [16, 16, 3], "pixels/wrist": [16, 16, 3]}
ENCODER = {"feature_dim": 8, "channels": 4, "layers": 2, "shift_pad": 2}
KINDS = {
    "mlp": lambda **kw: MLPPolicy(7, 4, horizon=4, execute=2, hidden=[32], **kw),
    "diffusion": lambda **kw: DiffusionPolicy(7, 4, horizon=4, execute=2, hidden=[32], num_train_steps=10,
                                              num_inference_steps=3, **kw),
    "flow": lambda **kw: FlowPolicy(7, 4, horizon=4, execute=2, hidden=[32], num_inference_steps=3, **kw),
}


pytestmark = pytest.mark.usefixtures("one_thread")


def _obs(n: int, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"state": torch.randn(n, 7, generator=g),
            **{k: torch.randint(0, 256, (n, *s), generator=g, dtype=torch.uint8) for k, s in CAMERAS.items()}}


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_camera_policy_trains_its_encoder_and_round_trips(kind, tmp_path) -> None:
    policy = KINDS[kind](cameras=CAMERAS, encoder=ENCODER)
    assert policy.cond_dim == 7 + 2 * 8 and policy.config()["cameras"] == CAMERAS
    policy.fit_normalization(torch.randn(50, 7), torch.rand(50, 4) * 2 - 1)
    loss = policy.train().loss(_obs(6), torch.rand(6, 4, 4) * 2 - 1)
    loss.backward()
    encoder_grads = [p.grad for p in policy.encoder.parameters()]
    assert all(g is not None for g in encoder_grads) and encoder_grads[0].abs().sum() > 0
    policy.eval()
    noise = torch.randn(3, 4, 4, generator=torch.Generator().manual_seed(1))
    chunk = policy.predict_chunk(_obs(3, 5), noise=noise)
    flipped = {**_obs(3, 5), "pixels/front": _obs(3, 5)["pixels/front"].flip(1)}
    assert not torch.equal(policy.condition(flipped), policy.condition(_obs(3, 5)))  # the images matter
    save_policy(policy, tmp_path / kind)
    loaded = load_policy(tmp_path / kind)
    torch.testing.assert_close(loaded.predict_chunk(_obs(3, 5), noise=noise), chunk, rtol=0, atol=0)
    with pytest.raises(ValueError, match="no camera group 'pixels/wrist'"):
        loaded.predict_chunk({k: v for k, v in _obs(2).items() if k != "pixels/wrist"})


def test_state_policies_keep_their_config_and_a_bad_encoder_setting_is_named() -> None:
    assert "cameras" not in MLPPolicy(7, 4).config() and MLPPolicy(7, 4).cond_dim == 7
    with pytest.raises(ValueError, match="unknown setting 'width'"):
        MLPPolicy(7, 4, cameras=CAMERAS, encoder={"width": 3})


@pytest.fixture(scope="module")
def pixel_demos(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pixel_bc") / "push"
    collect(CollectArgs(env=CollectEnvArgs(spec="arm:push-sparse-pixels", num_envs=1, max_episode_steps=12,
                                           pixel_size=[24, 24]), out=str(out), episodes=3, policy="expert", seed=0),
            message=lambda m: None)
    return out


def _bc(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["bc", "steps=6", "batch_size=8", "hidden=[16]", "horizon=4", "execute=2", "log_every=3",
                 "encoder_feature_dim=8", "encoder_channels=4", "encoder_layers=2", "threads=1", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_bc_learns_from_every_camera_of_the_dataset_and_evaluates_in_the_pixel_task(pixel_demos, tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = _bc(capsys, f"dataset={pixel_demos}", "policy=flow", "num_inference_steps=2",
                         f"run_dir={run}", "env.spec=arm:push-sparse-pixels", "eval_episodes=1",
                         "eval_max_episode_steps=5")
    assert code == 0, err
    assert "pixels/front 24x24" in out and "success rate" in out
    policy = load_policy(run / "policy")
    assert isinstance(policy, FlowPolicy) and set(policy.cameras) == {"pixels/front", "pixels/wrist"}
    # the Python API (and so `deploy`, which runs it on a robot serving these cameras) takes one dict observation
    from robot_rl.api import Agent

    agent = Agent.load(run / "policy")
    single = {"state": np.zeros(7, np.float32), **{g: np.zeros((24, 24, 3), np.uint8) for g in policy.cameras}}
    assert agent.cameras == policy.cameras and agent.predict(single).shape == (4,)


def test_bc_camera_choice_and_its_errors_are_one_line(pixel_demos, tmp_path, capsys):
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "cameras=[wrist]", f"run_dir={tmp_path / 'w'}")
    assert code == 0, err
    assert list(load_policy(tmp_path / "w" / "policy").cameras) == ["pixels/wrist"]
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "cameras=[side]", f"run_dir={tmp_path / 's'}")
    assert code == 2 and "has no 'side' video (its cameras: front, wrist)" in err and len(err.strip().splitlines()) == 1
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "env.spec=arm:push-sparse", f"run_dir={tmp_path / 'e'}")
    assert code == 2 and "has no camera group 'pixels/front'" in err and len(err.strip().splitlines()) == 1
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "cameras=[]", f"run_dir={tmp_path / 'n'}")
    assert code == 0 and "cameras" not in load_policy(tmp_path / "n" / "policy").config()


FINETUNE = ["env.spec=arm:push-sparse-pixels", "env.max_episode_steps=6", "env.num_eval_envs=1", "steps=12",
            "eval_every=12", "quiet=true", "threads=1", "agent.network.hidden_dims=[16,16]",
            "agent.network.critic_width=16",
            "agent.network.actor_width=16", "agent.optimiser.batch_size=4"]


@pytest.mark.parametrize("method, extra", [
    ("residual", ["residual.learning_starts=4", "residual.critic_warmup_updates=2"]),  # + camera demos below
    ("dsrl", ["dsrl.learning_starts=4"]),
])
def test_residual_and_dsrl_fine_tune_a_camera_policy_then_export_it(pixel_demos, tmp_path, capsys, method, extra):
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "policy=flow", f"run_dir={tmp_path / 'b'}")
    assert code == 0, err
    base = load_policy(tmp_path / "b" / "policy")
    demos = [f"data={pixel_demos}"] if method == "residual" else []
    run = tmp_path / "f"
    # env.pixel_size is left at its default (84x84): the run renders at the base's 24x24
    assert main(["finetune", f"method={method}", f"base_policy={tmp_path / 'b' / 'policy'}", f"run_dir={run}",
                 *FINETUNE, *extra, *demos]) == 0, capsys.readouterr().err
    stored = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)["replay"]["obs"]
    wide = base.cond_dim + (4 if method == "residual" else 0)  # the base's features (+ the base action): no frames
    assert set(stored) == {"state"} and stored["state"].shape[-1] == wide
    assert main(["export", f"run={run}", f"out={tmp_path / 'p'}"]) == 0, capsys.readouterr().err
    policy = load_policy(tmp_path / "p")
    assert policy.cameras == base.cameras
    from robot_rl.api import Agent

    single = {"state": np.zeros(7, np.float32), **{g: np.zeros((24, 24, 3), np.uint8) for g in base.cameras}}
    assert Agent.load(tmp_path / "p").predict(single).shape == (4,)


def test_ppo_fine_tuning_of_a_camera_policy_is_refused_in_one_line(pixel_demos, tmp_path, capsys):
    code, _, err = _bc(capsys, f"dataset={pixel_demos}", "policy=flow", f"run_dir={tmp_path / 'b'}")
    assert code == 0, err
    capsys.readouterr()
    assert main(["finetune", "method=reinflow", f"base_policy={tmp_path / 'b' / 'policy'}",
                 "env.spec=arm:push-sparse-pixels", "steps=10", f"run_dir={tmp_path / 'f'}", "quiet=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert "reads cameras (pixels/front, pixels/wrist); reinflow fine-tunes state policies only" in err
    assert len(err.splitlines()) == 1
    assert main(["finetune", "method=dsrl", f"base_policy={tmp_path / 'b' / 'policy'}",
                 "env.spec=arm:push-sparse", "steps=10", f"run_dir={tmp_path / 'g'}", "quiet=true"]) == 2
    err = capsys.readouterr().err.strip()
    assert "has no camera group 'pixels/front'" in err and len(err.splitlines()) == 1
