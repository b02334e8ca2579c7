import torch
from robot_rl.policies import EnsembleLinear, QEnsemble, mlp
from torch import nn


def _member_as_mlp(ens: QEnsemble, e: int, in_dim: int) -> nn.Sequential:
    """Copy member e of a stacked ensemble into an ordinary nn.Sequential MLP."""
    layers = list(ens.net.net)
    hidden = [m.out_features for m in layers if isinstance(m, EnsembleLinear)][:-1]
    ref = mlp(in_dim, 1, hidden, layer_norm=True)
    src = [m for m in layers if not isinstance(m, nn.ReLU)]
    dst = [m for m in ref if not isinstance(m, nn.ReLU)]
    with torch.no_grad():
        for s, d in zip(src, dst, strict=True):
            if isinstance(d, nn.Linear):
                d.weight.copy_(s.weight[e].T)
                d.bias.copy_(s.bias[e, 0])
            else:  # LayerNorm
                d.weight.copy_(s.weight[e, 0])
                d.bias.copy_(s.bias[e, 0])
    return ref


def test_q_ensemble_matches_independent_mlps():
    torch.manual_seed(0)
    obs_dim, act_dim, members = 5, 3, 7
    ens = QEnsemble(obs_dim, act_dim, num_critics=members, hidden=(32, 16), layer_norm=True)
    with torch.no_grad():  # non-trivial LayerNorm affine parameters
        for m in ens.modules():
            if m.__class__.__name__ == "EnsembleLayerNorm":
                m.weight.normal_()
                m.bias.normal_()
    obs, act = torch.randn(11, obs_dim), torch.rand(11, act_dim) * 2 - 1
    q = ens(obs, act)
    assert q.shape == (members, 11)
    x = torch.cat([obs, act], -1)
    for e in range(members):
        ref = _member_as_mlp(ens, e, obs_dim + act_dim)
        torch.testing.assert_close(q[e], ref(x).squeeze(-1), rtol=1e-5, atol=1e-5)


def test_members_are_initialised_independently():
    ens = QEnsemble(4, 2, num_critics=3, hidden=(8,))
    first = ens.net.net[0].weight
    assert not torch.allclose(first[0], first[1])


def test_ensemble_linear_accepts_per_member_inputs():
    lin = EnsembleLinear(4, 6, 2)
    x = torch.randn(4, 9, 6)
    out = lin(x)
    for e in range(4):
        torch.testing.assert_close(out[e], x[e] @ lin.weight[e] + lin.bias[e])


def test_gradients_flow_to_every_member():
    ens = QEnsemble(3, 1, num_critics=4, hidden=(8, 8))
    ens(torch.randn(5, 3), torch.randn(5, 1)).sum().backward()
    grad = ens.net.net[0].weight.grad
    assert all(grad[e].abs().sum() > 0 for e in range(4))
