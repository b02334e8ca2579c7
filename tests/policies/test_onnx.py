"""ONNX graphs of every saved-policy kind: onnxruntime on the CPU gives torch's outputs (within 1e-5), for
several batch sizes (the batch is dynamic), and the graphs' inputs are what the module docstring promises."""

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
from robot_rl.policies.onnx import ONNX_FILE, example_inputs, export_onnx, graph

from tests.policies.briefly_trained import briefly_trained

OBS, A, H = 5, 2, 4


pytestmark = pytest.mark.usefixtures("one_thread")


def fitted(policy):
    return briefly_trained(policy, obs_scale=3.0)


def actor(obs_dim: int, action_dim: int, network: str = "mlp") -> dict:
    return {"obs_dim": obs_dim, "action_dim": action_dim, "network": network, "hidden": [32], "width": 16,
            "obs_norm": True}


def with_obs_stats(policy: ActorPolicy, dim: int) -> ActorPolicy:
    policy.actor.obs_norm.update(torch.randn(100, dim) * 2 + 0.5)  # statistics that change the output
    return policy.eval()


def diffusion():
    return fitted(DiffusionPolicy(OBS, A, H, execute=2, hidden=[32], num_train_steps=20, num_inference_steps=4))


def flow():
    return fitted(FlowPolicy(OBS, A, H, execute=3, hidden=[32], num_inference_steps=3))


def residual():
    base = diffusion()
    policy = ResidualPolicy(base_spec(base), actor(OBS + A, A), scale=0.3)
    policy.base.load_state_dict(base.state_dict())
    with_obs_stats(policy.correction, OBS + A)
    return policy.eval()


def dsrl():
    base = flow()
    policy = NoiseSteeredPolicy(base_spec(base), actor(OBS, H * A, "hyper"), noise_bound=1.5)
    policy.base.load_state_dict(base.state_dict())
    with_obs_stats(policy.steering, OBS)
    return policy.eval()


def sac_pixels() -> ActorPolicy:
    """A SAC actor from two cameras (an exported pixel agent), its state statistics fitted."""
    policy = ActorPolicy(**actor(OBS, A), cameras={"pixels/front": [20, 16, 3], "pixels/wrist": [20, 16, 3]},
                         encoder_feature_dim=6, encoder_channels=4, encoder_layers=2)
    policy.state_norm.update(torch.randn(100, OBS) * 2 + 0.5)
    return policy.eval()


def bc_pixels(kind: type) -> MLPPolicy | FlowPolicy:
    """A BC policy from two cameras (`robot-rl bc` on a camera dataset), normalisers fitted, untrained."""
    extra = {"num_inference_steps": 3} if kind is FlowPolicy else {}
    policy = kind(OBS, A, H, execute=2, hidden=[32], cameras={"pixels/front": [20, 16, 3], "pixels/wrist": [20, 16, 3]},
                  encoder={"feature_dim": 6, "channels": 4, "layers": 2}, **extra)
    policy.fit_normalization(torch.randn(100, OBS) * 2 + 0.5, torch.rand(100, A) * 2 - 1)
    return policy.eval()


def residual_pixels() -> ResidualPolicy:
    """A residual correction on a camera BC policy: it reads the base's conditioning (state + camera features)."""
    base = bc_pixels(FlowPolicy)
    policy = ResidualPolicy(base_spec(base), actor(base.cond_dim + A, A), scale=0.3)
    policy.base.load_state_dict(base.state_dict())
    with_obs_stats(policy.correction, base.cond_dim + A)
    return policy.eval()


def dsrl_pixels() -> NoiseSteeredPolicy:
    base = bc_pixels(FlowPolicy)
    policy = NoiseSteeredPolicy(base_spec(base), actor(base.cond_dim, H * A), noise_bound=1.5)
    policy.base.load_state_dict(base.state_dict())
    with_obs_stats(policy.steering, base.cond_dim)
    return policy.eval()


KINDS = {
    "sac_mlp": lambda: with_obs_stats(ActorPolicy(**actor(OBS, A)), OBS),
    "sac_default_agent": lambda: with_obs_stats(ActorPolicy(**actor(OBS, A, "hyper")), OBS),
    "sac_pixels": sac_pixels,
    "bc_mlp": lambda: fitted(MLPPolicy(OBS, A, H, execute=2, hidden=[32])),
    "diffusion": diffusion,
    "flow": flow,
    "residual": residual,
    "dsrl": dsrl,
    "bc_mlp_pixels": lambda: bc_pixels(MLPPolicy),
    "flow_pixels": lambda: bc_pixels(FlowPolicy),
    "residual_pixels": residual_pixels,
    "dsrl_pixels": dsrl_pixels,
}
INPUTS = {
    "sac_mlp": ["obs"], "sac_default_agent": ["obs"], "sac_pixels": ["state", "pixels/front", "pixels/wrist"], "bc_mlp": ["obs"], "diffusion": ["obs", "noise"],
    "flow": ["obs", "noise"], "residual": ["obs", "queue", "pos"], "dsrl": ["obs", "noise"],
    "bc_mlp_pixels": ["state", "pixels/front", "pixels/wrist"],
    "flow_pixels": ["state", "pixels/front", "pixels/wrist", "noise"],
    "residual_pixels": ["state", "pixels/front", "pixels/wrist", "queue", "pos"],
    "dsrl_pixels": ["state", "pixels/front", "pixels/wrist", "noise"],
}


def run_onnx(path, inputs: dict[str, torch.Tensor]) -> list[np.ndarray]:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {k: v.numpy() for k, v in inputs.items()})


@pytest.mark.parametrize("kind", list(KINDS))
def test_onnxruntime_matches_torch(tmp_path, kind):
    torch.manual_seed(0)
    policy = KINDS[kind]()
    description = export_onnx(policy, tmp_path / ONNX_FILE)
    assert [s["name"] for s in description["inputs"]] == INPUTS[kind]
    module, inputs, outputs = graph(policy)
    for batch in (1, 7):
        xs = example_inputs(inputs, batch, seed=batch)
        with torch.no_grad():
            expected = module(*xs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        got = run_onnx(tmp_path / ONNX_FILE, {s["name"]: x for s, x in zip(inputs, xs, strict=True)})
        assert len(got) == len(expected) == len(outputs)
        for g, e, spec in zip(got, expected, outputs, strict=True):
            assert list(g.shape) == [batch if d == "N" else d for d in spec["shape"]]
            # Diffusion is the tight one: its first DDIM step divides the noise network's float32 rounding
            # (torch's and onnxruntime's matmuls round differently) by sqrt(abar_T); about 6e-6 on these inputs.
            np.testing.assert_allclose(g, e.numpy(), rtol=0, atol=1e-5)
        action = expected[0]
        assert action.abs().max() <= 1 and (action.abs() < 0.999).any()  # in range, and not all clipped
        base = getattr(policy, "base", policy)
        if hasattr(base, "action_norm"):  # and the chunks are not all on the sampler's clip bounds either
            chunk = expected[1] if kind.startswith("residual") else expected[0]
            assert (base.action_norm.normalize(chunk).abs() < 0.999).float().mean() > 0.5


@pytest.mark.parametrize("kind", ["diffusion", "flow", "dsrl"])
def test_zero_noise_is_the_deterministic_chunk_and_noise_changes_it(tmp_path, kind):
    torch.manual_seed(0)
    policy = KINDS[kind]()
    export_onnx(policy, tmp_path / ONNX_FILE)
    obs = torch.randn(3, OBS)
    (zero,) = run_onnx(tmp_path / ONNX_FILE, {"obs": obs, "noise": torch.zeros(3, H, A)})
    with torch.no_grad():
        np.testing.assert_allclose(zero, policy.predict_chunk(obs, deterministic=True).numpy(), rtol=0, atol=1e-5)
    (noisy,) = run_onnx(tmp_path / ONNX_FILE, {"obs": obs, "noise": torch.randn(3, H, A)})
    assert np.abs(noisy - zero).max() > 1e-3


def test_residual_graph_fed_back_plays_the_chunks_as_act_does(tmp_path):
    """The queue and pos outputs fed back for several calls, with an episode restart of one env, give the
    actions of `act` with its own queue and `reset`."""
    torch.manual_seed(0)
    policy = residual()
    export_onnx(policy, tmp_path / ONNX_FILE)
    session = ort.InferenceSession(str(tmp_path / ONNX_FILE), providers=["CPUExecutionProvider"])
    n = 3
    queue, pos = np.zeros((n, H, A), np.float32), np.full(n, policy.execute, np.int64)
    policy.reset()
    for t in range(7):
        obs = torch.randn(n, OBS)
        if t == 3:
            restart = torch.tensor([False, True, False])
            policy.reset(restart)
            pos[restart.numpy()] = policy.execute
        action, queue, pos = session.run(None, {"obs": obs.numpy(), "queue": queue, "pos": pos})
        np.testing.assert_allclose(action, policy.act(obs, deterministic=True).numpy(), rtol=0, atol=1e-5)


def test_a_residual_policy_with_a_sampling_base_has_no_graph(tmp_path):
    policy = residual()
    policy.base_deterministic = False
    with pytest.raises(ValueError, match="base_deterministic=false"):
        export_onnx(policy, tmp_path / ONNX_FILE)
    assert not (tmp_path / ONNX_FILE).exists()


def test_an_unknown_module_has_no_graph(tmp_path):
    with pytest.raises(TypeError, match="no ONNX graph for Linear"):
        export_onnx(torch.nn.Linear(2, 2), tmp_path / ONNX_FILE)
