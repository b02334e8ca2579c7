"""Normaliser: the modes, exact inverses, constant dimensions, statistics saved as buffers."""

import pytest
import torch

from policies.normalize import Normalizer


def test_min_max_maps_the_data_range_onto_the_unit_box_and_back():
    x = torch.tensor([[0.0, 10.0, 3.0], [2.0, 20.0, 3.0], [1.0, 12.0, 3.0]])
    norm = Normalizer(3, "min_max").fit(x)
    y = norm(x)
    assert y[:, :2].amin(0).tolist() == [-1.0, -1.0] and y[:, :2].amax(0).tolist() == [1.0, 1.0]
    assert y[:, 2].tolist() == [0.0, 0.0, 0.0]  # a constant dimension is centred, never divided by ~0
    torch.testing.assert_close(norm.unnormalize(y), x)


def test_mean_std_and_identity():
    x = torch.randn(1000, 2, dtype=torch.float64) * torch.tensor([3.0, 0.5]) + torch.tensor([1.0, -2.0])
    y = Normalizer(2, "mean_std").fit(x.float())(x.float())
    torch.testing.assert_close(y.mean(0), torch.zeros(2), atol=1e-5, rtol=0)
    torch.testing.assert_close(y.std(0, unbiased=False), torch.ones(2), atol=1e-5, rtol=0)
    ident = Normalizer(2, "identity").fit(x.float())
    assert torch.equal(ident(x.float()), x.float())


def test_statistics_are_buffers_in_the_state_dict():
    norm = Normalizer(2, "mean_std").fit(torch.tensor([[1.0, 2.0], [3.0, 6.0]]))
    fresh = Normalizer(2, "mean_std")
    fresh.load_state_dict(norm.state_dict())
    assert torch.equal(fresh.shift, torch.tensor([2.0, 4.0])) and torch.equal(
        fresh.scale, torch.tensor([1.0, 2.0])
    )


def test_unknown_mode_and_empty_data():
    with pytest.raises(ValueError, match="choose one of"):
        Normalizer(2, "zscore")
    with pytest.raises(ValueError, match="zero samples"):
        Normalizer(2).fit(torch.zeros(0, 2))
