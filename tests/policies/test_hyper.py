"""Hyperspherical networks: the norm invariants hold after optimiser steps, and the modules are ensembles."""

import torch
from robot_rl.policies.hyper import HyperActorTrunk, HyperLinear, HyperQEnsemble, l2_normalize, project_
from robot_rl.policies.normalize import RunningNorm


def _weight_columns_unit(module: torch.nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, HyperLinear):
            norms = m.weight.norm(dim=1)  # [E, out]: one norm per output unit
            torch.testing.assert_close(norms, torch.ones_like(norms), atol=1e-5, rtol=0)


def test_weights_return_to_the_sphere_after_every_optimiser_step():
    torch.manual_seed(0)
    q = HyperQEnsemble(5, 2, num_critics=3, hidden=32, num_blocks=2, num_atoms=11)
    opt = torch.optim.Adam(q.parameters(), lr=1e-2)
    _weight_columns_unit(q)
    for _ in range(5):
        loss = q.logits(torch.randn(64, 5), torch.rand(64, 2)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        moved = max((m.weight.norm(dim=1) - 1).abs().max().item() for m in q.modules() if isinstance(m, HyperLinear))
        assert moved > 1e-4  # the step itself leaves the sphere ...
        project_(q)
        _weight_columns_unit(q)  # ... and the projection brings every column back


def test_hidden_features_stay_on_the_unit_sphere_for_any_input_scale():
    torch.manual_seed(0)
    q = HyperQEnsemble(4, 1, num_critics=2, hidden=16, num_blocks=2, num_atoms=1)
    for scale in (1e-3, 1.0, 1e4):
        z = q.encoder(torch.cat([torch.randn(32, 4) * scale, torch.rand(32, 1)], dim=-1))
        assert z.shape == (2, 32, 16)
        torch.testing.assert_close(z.norm(dim=-1), torch.ones(2, 32), atol=1e-5, rtol=0)


def test_ensemble_members_are_independent_networks():
    """Member e of a 3-critic ensemble gives what the same weights give alone (one batched matmul is exact)."""
    torch.manual_seed(0)
    q = HyperQEnsemble(4, 2, num_critics=3, hidden=16, num_blocks=1, num_atoms=7)
    obs, act = torch.randn(8, 4), torch.rand(8, 2)
    full = q.logits(obs, act)
    for e in range(3):
        single = HyperQEnsemble(4, 2, num_critics=1, hidden=16, num_blocks=1, num_atoms=7)
        single.load_state_dict({k: v[e : e + 1] if v.dim() and v.shape[0] == 3 else v for k, v in q.state_dict().items()})
        torch.testing.assert_close(single.logits(obs, act)[0], full[e])


def test_categorical_values_are_expectations_over_the_support():
    q = HyperQEnsemble(3, 1, num_critics=2, hidden=8, num_atoms=5, v_max=2.0)
    logits = torch.tensor([[[0.0, 0.0, 0.0, 0.0, 100.0]], [[100.0, 0.0, 0.0, 0.0, 0.0]]])
    torch.testing.assert_close(q.values(logits), torch.tensor([[2.0], [-2.0]]))


def test_actor_trunk_output_layer_can_be_zeroed():
    trunk = HyperActorTrunk(6, 4, hidden=16)
    weight, bias = trunk.output_layer
    with torch.no_grad():
        weight.zero_()
        bias.zero_()
    assert torch.equal(trunk(torch.randn(3, 6)), torch.zeros(3, 4))


def test_shared_obs_norm_is_applied_inside_the_critic():
    norm = RunningNorm(3)
    norm.update(torch.randn(1000, 3) * 50 + 100)
    q = HyperQEnsemble(3, 1, num_critics=2, hidden=8, num_atoms=1, obs_norm=norm)
    obs, act = torch.randn(4, 3) * 50 + 100, torch.rand(4, 1)
    plain = HyperQEnsemble(3, 1, num_critics=2, hidden=8, num_atoms=1)
    plain.load_state_dict({k: v for k, v in q.state_dict().items() if not k.startswith("obs_norm")})
    torch.testing.assert_close(q(obs, act), plain(norm(obs), act))


def test_l2_normalize_is_safe_at_zero():
    assert torch.isfinite(l2_normalize(torch.zeros(2, 3))).all()
