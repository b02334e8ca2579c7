"""CounterRNG: per-env seeding, independence from other envs' resets, and sane distributions."""

from __future__ import annotations

import torch
from robot_rl.envs.sim.rng import CounterRNG

CPU = torch.device("cpu")


def test_env_i_is_seeded_with_seed_plus_i() -> None:
    a, b = CounterRNG(4, CPU), CounterRNG(3, CPU)
    a.seed(7)
    b.seed(8)
    assert torch.equal(a.uniform((5,))[1:], b.uniform((5,)))
    assert not torch.equal(a.uniform((5,))[0], a.uniform((5,))[1])


def test_draws_advance_only_for_envs_that_reset() -> None:
    rng = CounterRNG(3, CPU)
    rng.seed(0)
    first = rng.uniform((4,))
    second_draw = rng.uniform((4,))
    assert not torch.equal(first, second_draw)  # a second draw within one reset differs
    rng.advance(torch.tensor([True, False, False]))
    again = rng.uniform((4,))
    assert not torch.equal(again[0], first[0])  # env 0 moved on
    assert torch.equal(again[1:], first[1:])  # envs 1 and 2 see the same numbers until they use them


def test_stream_of_one_env_does_not_depend_on_the_others() -> None:
    """Env 0's starts are the same whether env 1 resets every time or never."""
    busy, idle = CounterRNG(2, CPU), CounterRNG(2, CPU)
    busy.seed(3)
    idle.seed(3)
    for _ in range(5):
        x, y = busy.normal((2,)), idle.normal((2,))
        assert torch.equal(x[0], y[0])
        busy.advance(torch.tensor([True, True]))
        idle.advance(torch.tensor([True, False]))


def test_distributions() -> None:
    rng = CounterRNG(2, CPU)
    rng.seed(123)
    u = rng.uniform((200_000,), -2.0, 3.0)
    assert u.min() >= -2.0 and u.max() < 3.0
    torch.testing.assert_close(u.mean(1), torch.full((2,), 0.5, dtype=torch.float64), atol=0.02, rtol=0)
    n = rng.normal((200_000,))
    torch.testing.assert_close(n.mean(1), torch.zeros(2, dtype=torch.float64), atol=0.01, rtol=0)
    torch.testing.assert_close(n.std(1), torch.ones(2, dtype=torch.float64), atol=0.01, rtol=0)
    # Neighbouring envs and neighbouring elements are uncorrelated.
    assert abs(torch.corrcoef(n)[0, 1]) < 0.01
    assert abs(torch.corrcoef(torch.stack([n[0, :-1], n[0, 1:]]))[0, 1]) < 0.01


def test_seed_zero_does_not_start_at_the_edge_of_every_box() -> None:
    """SplitMix64's finaliser maps 0 to 0, so seed 0's env 0 drew exactly 0.0 as its first uniform: ArmEnv(seed=0)
    and sub-env 0 of every sim task seeded 0 always started at the low corner of the reset box."""
    rng = CounterRNG(3, CPU)
    rng.seed(0)
    first = rng.uniform((3,))
    assert (first > 0).all() and (first < 1).all()
