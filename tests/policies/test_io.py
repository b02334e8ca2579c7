"""Saved policies: round trips for every class, loading without the training code, clear errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import (
    CONFIG,
    POLICY_CLASSES,
    WEIGHTS,
    PolicyFormatError,
    load_policy,
    read_metadata,
    save_policy,
)

REPO = Path(__file__).resolve().parents[2]
OBS, A, H = 5, 2, 4

VARIANTS = {
    "mlp": lambda: MLPPolicy(OBS, A, horizon=H, execute=2, hidden=(16, 16)),
    "mlp_gaussian": lambda: MLPPolicy(OBS, A, horizon=H, hidden=(16,), gaussian=True, obs_norm="min_max"),
    "diffusion": lambda: DiffusionPolicy(
        OBS, A, horizon=H, hidden=(16, 16), num_train_steps=20, eta=0.5, beta_schedule="linear"
    ),
    "flow": lambda: FlowPolicy(OBS, A, horizon=H, execute=3, hidden=(16, 16), action_norm="mean_std"),
}


def fitted(name: str):
    torch.manual_seed(0)
    policy = VARIANTS[name]()
    policy.fit_normalization(torch.randn(50, OBS) * 3 + 1, torch.rand(50, A) * 1.5 - 0.9)
    return policy


@pytest.mark.parametrize("name", list(VARIANTS))
def test_round_trip_same_outputs_for_the_same_noise(tmp_path, name):
    policy = fitted(name)
    policy.num_inference_steps = 3  # a setting changed after construction is saved too (no-op for the MLP)
    save_policy(policy, tmp_path / "p", metadata={"dataset": "data/x"})
    loaded = load_policy(tmp_path / "p")
    assert type(loaded) is type(policy) and loaded.config() == policy.config()
    assert read_metadata(tmp_path / "p") == {"dataset": "data/x"}
    obs, noise = torch.randn(6, OBS), torch.randn(6, H, A)
    with torch.no_grad():
        torch.manual_seed(1)  # the diffusion variant (eta > 0) draws noise at every DDIM step too
        expected = policy.predict_chunk(obs, noise)
        torch.manual_seed(1)
        torch.testing.assert_close(loaded.predict_chunk(obs, noise), expected, rtol=0, atol=0)
        torch.testing.assert_close(loaded.obs_norm.scale, policy.obs_norm.scale, rtol=0, atol=0)
    assert loaded.act({"state": obs}).shape == (6, A) and not loaded.training


def test_save_replaces_an_existing_policy_atomically_and_leaves_no_temporaries(tmp_path):
    save_policy(fitted("mlp"), tmp_path / "p")
    save_policy(fitted("flow"), tmp_path / "p")
    assert isinstance(load_policy(tmp_path / "p"), FlowPolicy)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    assert sorted(p.name for p in (tmp_path / "p").iterdir()) == [CONFIG, WEIGHTS]


def test_save_refuses_to_replace_something_else(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a saved policy"):
        save_policy(fitted("mlp"), tmp_path / "notes")
    assert (tmp_path / "notes" / "a.txt").read_text() == "keep me"


def test_loading_needs_only_the_policies_package(tmp_path):
    for name in ("mlp", "diffusion", "flow"):
        policy = fitted(name)
        save_policy(policy, tmp_path / name)
    obs, noise = torch.randn(3, OBS), torch.randn(3, H, A)
    torch.save({"obs": obs, "noise": noise}, tmp_path / "inputs.pt")
    script = (
        "import sys, torch\n"
        "from robot_rl.policies.io import load_policy\n"
        f"d = {str(tmp_path)!r}\n"
        "x = torch.load(d + '/inputs.pt')\n"
        "out = {}\n"
        "for n in ('mlp', 'diffusion', 'flow'):\n"
        "    policy = load_policy(d + '/' + n)\n"
        "    torch.manual_seed(1)\n"
        "    out[n] = policy.predict_chunk(x['obs'], x['noise'])\n"
        "torch.save(out, d + '/outputs.pt')\n"
        # robot_rl.errors (the one user-error base class, importing nothing) is not training code
        "bad = sorted(m for m in sys.modules if m.startswith('robot_rl.') and not m.startswith('robot_rl.policies')\n"
        "             and m != 'robot_rl.errors')\n"
        "assert not bad, bad\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    out = torch.load(tmp_path / "outputs.pt")
    for name in ("mlp", "diffusion", "flow"):
        policy = fitted(name)
        torch.manual_seed(1)
        with torch.no_grad():
            expected = policy.predict_chunk(obs, noise)
        torch.testing.assert_close(out[name], expected, rtol=0, atol=0)


def _saved(tmp_path: Path) -> Path:
    return save_policy(fitted("diffusion"), tmp_path / "p")


def _edit_config(path: Path, **changes) -> None:
    config = json.loads((path / CONFIG).read_text())
    config.update(changes)
    (path / CONFIG).write_text(json.dumps(config))


@pytest.mark.parametrize(
    "damage, match",
    [
        (lambda p: (p / WEIGHTS).unlink(), "model.safetensors: missing"),
        (lambda p: (p / CONFIG).unlink(), "config.json: missing"),
        (lambda p: (p / CONFIG).write_text("{not json"), "not valid JSON"),
        (lambda p: (p / CONFIG).write_text("[1, 2]"), "not a robot_rl.policy config"),
        (
            lambda p: _edit_config(p, **{"class": "TransformerPolicy"}),
            "unknown policy class 'TransformerPolicy'; known: ",
        ),
        (lambda p: _edit_config(p, format_version=99), "format_version 99"),
        (
            lambda p: _edit_config(p, kwargs={"obs_dim": 5, "action_dim": 2, "bogus": 1}),
            "cannot build DiffusionPolicy",
        ),
        (lambda p: (p / WEIGHTS).write_bytes((p / WEIGHTS).read_bytes()[:100]), "unreadable weights"),
        (lambda p: (p / WEIGHTS).write_bytes(b"\x00" * 64), "unreadable weights"),
    ],
    ids=["weights", "config", "json", "not-config", "class", "version", "kwargs", "truncated", "garbage"],
)
def test_damaged_policies_are_clear_errors(tmp_path, damage, match):
    path = _saved(tmp_path)
    damage(path)
    with pytest.raises(PolicyFormatError, match=match):
        load_policy(path)


def test_missing_directory(tmp_path):
    with pytest.raises(PolicyFormatError, match="no such policy directory"):
        load_policy(tmp_path / "nope")


def test_weights_that_do_not_fit_the_config(tmp_path):
    path = _saved(tmp_path)
    config = json.loads((path / CONFIG).read_text())
    config["kwargs"]["hidden"] = [32, 32]
    (path / CONFIG).write_text(json.dumps(config))
    with pytest.raises(PolicyFormatError, match="weights do not fit DiffusionPolicy"):
        load_policy(path)


def test_registry_lists_every_kind():
    assert set(POLICY_CLASSES) == {
        "MLPPolicy", "DiffusionPolicy", "FlowPolicy", "ActorPolicy", "ResidualPolicy", "NoiseSteeredPolicy"
    }
