"""Saved SAC actors, residual and noise-steered policies: round trips through the policy directory act the same,
and configs that do not fit together are refused with a message naming the mismatch."""

import os
import subprocess
import sys
from pathlib import Path

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
from robot_rl.policies.actor_policy import make_actor
from robot_rl.policies.composed import base_spec, residual_action
from robot_rl.policies.io import load_policy, save_policy

OBS, A, H = 5, 2, 4
REPO = Path(__file__).resolve().parents[2]


def fitted(policy):
    torch.manual_seed(0)
    policy.fit_normalization(torch.randn(64, OBS) * 3 + 1, torch.rand(64, A) * 1.2 - 0.6)
    return policy


def actor(obs_dim: int, action_dim: int, **kw) -> dict:
    return {"obs_dim": obs_dim, "action_dim": action_dim, "hidden": [16], "width": 16, "obs_norm": True, **kw}


def residual(base=None) -> ResidualPolicy:
    base = base or fitted(MLPPolicy(OBS, A, H, execute=2, hidden=[16]))
    policy = ResidualPolicy(base_spec(base), actor(OBS + A, A), scale=0.4)
    policy.base.load_state_dict(base.state_dict())
    return policy


def steered() -> NoiseSteeredPolicy:
    base = fitted(DiffusionPolicy(OBS, A, H, execute=3, hidden=[16], num_train_steps=10, num_inference_steps=3))
    policy = NoiseSteeredPolicy(base_spec(base), actor(OBS, H * A, network="hyper"), noise_bound=2.0)
    policy.base.load_state_dict(base.state_dict())
    return policy


MAKERS = {
    "actor_mlp": lambda: ActorPolicy(**actor(OBS, A, layer_norm=True, action_repeat=2)),
    "actor_hyper": lambda: ActorPolicy(**actor(OBS, A, network="hyper", blocks=2)),
    "residual": residual,
    "steered": steered,
}


def stats_of(policy) -> None:
    """Observation statistics that move the output, so a round trip that dropped them would show."""
    for m in policy.modules():
        if hasattr(m, "update") and hasattr(m, "count"):
            m.update(torch.randn(50, m.dim) * 2 + 1)


@pytest.mark.parametrize("name", list(MAKERS))
def test_round_trip_acts_the_same(tmp_path, name):
    torch.manual_seed(0)
    policy = MAKERS[name]().eval()
    stats_of(policy)
    save_policy(policy, tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert type(loaded) is type(policy) and loaded.config() == policy.config()
    obs = torch.randn(4, OBS)
    for _ in range(5):  # across chunk boundaries of the chunked ones
        torch.testing.assert_close(loaded.act({"state": obs}, deterministic=True),
                                   policy.act(obs, deterministic=True), rtol=0, atol=0)
    noise = torch.randn(4, A) if name.startswith("actor") else None
    if noise is not None:  # a given draw makes the stochastic action reproducible, and it differs from the mean
        torch.testing.assert_close(loaded.act(obs, noise=noise), policy.act(obs, noise=noise), rtol=0, atol=0)
        assert not torch.equal(policy.act(obs, noise=noise), policy.act(obs, deterministic=True))


def test_actor_policy_is_tanh_of_the_actor_mean():
    torch.manual_seed(0)
    policy = ActorPolicy(**actor(OBS, A)).eval()
    stats_of(policy)
    obs = torch.randn(3, OBS)
    torch.testing.assert_close(policy.act(obs, deterministic=True), policy.actor.act(obs, deterministic=True))
    assert policy.act(obs).shape == (3, A)
    with pytest.raises(ValueError, match=r"expected observations \[N, 5\], got \(3, 4\)"):
        policy.act(torch.randn(3, 4))


def camera_actor() -> ActorPolicy:
    """A SAC actor from cameras (the pixel agent's export): state statistics, one small encoder per camera."""
    return ActorPolicy(**actor(OBS, A, cameras={"pixels/wrist": [20, 16, 3], "pixels/front": [20, 16, 3]},
                               encoder_feature_dim=6, encoder_channels=4, encoder_layers=2))


def camera_obs(n: int, size: tuple[int, int] = (20, 16)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(n)
    return {"state": torch.randn(n, OBS, generator=g) * 2,
            **{k: torch.randint(0, 256, (n, *size, 3), generator=g, dtype=torch.uint8)
               for k in ("pixels/front", "pixels/wrist")}}


def test_camera_actor_round_trip_acts_the_same(tmp_path):
    torch.manual_seed(0)
    policy = camera_actor().eval()
    stats_of(policy)
    assert policy.actor.obs_norm is None and policy.state_norm is not None  # normalised before the fusion
    assert list(policy.cameras) == ["pixels/front", "pixels/wrist"]  # sorted, as CameraFusion orders them
    save_policy(policy, tmp_path / "p")
    loaded = load_policy(tmp_path / "p")
    assert loaded.config() == policy.config() and loaded.config()["cameras"]["pixels/front"] == [20, 16, 3]
    obs, noise = camera_obs(4), torch.randn(4, A)
    expected = policy.act(obs, deterministic=True)
    torch.testing.assert_close(loaded.act(obs, deterministic=True), expected, rtol=0, atol=0)
    torch.testing.assert_close(loaded.act(obs, noise=noise), policy.act(obs, noise=noise), rtol=0, atol=0)
    other = {**obs, "pixels/wrist": obs["pixels/wrist"].flip(2)}
    assert not torch.equal(policy.act(other, deterministic=True), expected)  # each camera is read
    assert "cameras" not in ActorPolicy(**actor(OBS, A)).config()  # state-only configs are as they were


def test_camera_actor_names_a_missing_or_misshapen_camera():
    policy = camera_actor().eval()
    obs = camera_obs(3)
    with pytest.raises(ValueError, match=r"no camera group 'pixels/wrist' \(expected uint8 \[N, 20, 16, 3\] images"):
        policy.act({k: v for k, v in obs.items() if k != "pixels/wrist"})
    with pytest.raises(ValueError, match=r"no camera group 'pixels/front' \(expected uint8 \[N, 20, 16, 3\]"):
        policy.act(obs["state"])
    with pytest.raises(ValueError, match=r"'pixels/front': expected uint8 \[N, 20, 16, 3\] images with N=3 "
                                         r"\(the state's\), got uint8 \[3, 16, 20, 3\]"):
        policy.act(camera_obs(3, size=(16, 20)))
    with pytest.raises(ValueError, match=r"'pixels/front': expected uint8 .* got float32 \[3, 20, 16, 3\]"):
        policy.act({**obs, "pixels/front": obs["pixels/front"].float()})
    with pytest.raises(ValueError, match=r"image shape must be \[H, W, C\], got \[20, 16\]"):
        ActorPolicy(OBS, A, cameras={"pixels/front": [20, 16]})
    with pytest.raises(ValueError, match="camera groups are 'pixels' or 'pixels/<camera>'"):
        ActorPolicy(OBS, A, cameras={"front": [20, 16, 3]})


def test_residual_action_is_the_clipped_scaled_sum():
    base, r = torch.tensor([[0.5, -0.95]]), torch.tensor([[1.0, -1.0]])
    torch.testing.assert_close(residual_action(base, r, 0.2), torch.tensor([[0.7, -1.0]]))


def test_residual_policy_plays_the_base_chunk_and_resets_it():
    policy = residual().eval()
    obs = torch.randn(2, OBS)
    policy.act(obs, deterministic=True)
    assert int(policy.base.chunker.pos[0]) == 1
    policy.reset(torch.tensor([True, False]))
    assert policy.base.chunker.pos.tolist() == [policy.execute, 1]


def test_noise_steered_policy_maps_zero_noise_to_the_mean_steering():
    policy = steered().eval()
    obs = torch.randn(3, OBS)
    with torch.no_grad():
        zero = policy.predict_chunk(obs, torch.zeros(3, H, A))
        torch.testing.assert_close(zero, policy.predict_chunk(obs, deterministic=True), rtol=0, atol=0)
        assert not torch.equal(policy.predict_chunk(obs, torch.randn(3, H, A)), zero)
    assert policy.noise_shape == (H, A)
    policy.act(obs)
    policy.reset()
    assert policy.chunker.queue is None


def test_mismatched_parts_are_refused():
    base = fitted(FlowPolicy(OBS, A, H, hidden=[16]))
    with pytest.raises(ValueError, match=r"\[base features, base action\] \(7 values\), not 5"):
        ResidualPolicy(base_spec(base), actor(OBS, A), scale=0.1)
    with pytest.raises(ValueError, match="must map 5 base features to 8 noise values"):
        NoiseSteeredPolicy(base_spec(base), actor(OBS, A), noise_bound=1.0)
    with pytest.raises(ValueError, match="steers a diffusion or flow policy, not a MLPPolicy"):
        NoiseSteeredPolicy(base_spec(MLPPolicy(OBS, A, H)), actor(OBS, H * A), noise_bound=1.0)
    with pytest.raises(ValueError, match="unknown base policy class 'ActorPolicy'"):
        ResidualPolicy({"class": "ActorPolicy", "kwargs": {}}, actor(OBS + A, A), scale=0.1)
    with pytest.raises(ValueError, match="unknown actor network 'cnn'"):
        make_actor(OBS, A, network="cnn")


def test_the_stateless_residual_step_needs_a_deterministic_base():
    policy = residual()
    policy.base_deterministic = False
    with pytest.raises(ValueError, match="deterministic base"):
        policy.step(torch.randn(1, OBS), torch.zeros(1, H, A), torch.full((1,), 2))


def test_loading_and_acting_needs_no_training_code(tmp_path):
    torch.manual_seed(0)
    for name, make in MAKERS.items():
        save_policy(make().eval(), tmp_path / name)
    script = (
        "import sys, torch\n"
        "from robot_rl.policies.io import load_policy\n"
        f"for name in {list(MAKERS)!r}:\n"
        "    assert load_policy(name).act(torch.zeros(2, 5), deterministic=True).shape == (2, 2)\n"
        # robot_rl.errors (the one user-error base class, importing nothing) is not training code
        "bad = sorted(m for m in sys.modules if m.startswith('robot_rl.') and not m.startswith('robot_rl.policies')\n"
        "             and m != 'robot_rl.errors')\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
