"""Action chunking: execution order, re-planning after `execute` steps, per-env reset semantics."""

import pytest
import torch
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.chunking import ActionChunker

N, H, A = 2, 4, 1


class StubPlanner:
    """Chunks whose entries say which plan, env and chunk position they are: 1000 * plan + 10 * env + h."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> torch.Tensor:
        self.calls += 1
        env = torch.arange(N)[:, None, None]
        h = torch.arange(H)[None, :, None]
        return (1000 * self.calls + 10 * env + h).float().expand(N, H, A).clone()


def play(chunker: ActionChunker, plan: StubPlanner) -> list[int]:
    return chunker.act(plan)[:, 0].long().tolist()


def test_plays_the_first_execute_actions_in_order_then_replans():
    chunker, plan = ActionChunker(H, execute=3), StubPlanner()
    assert [play(chunker, plan) for _ in range(3)] == [[1000, 1010], [1001, 1011], [1002, 1012]]
    assert plan.calls == 1
    assert play(chunker, plan) == [2000, 2010]  # action h=3 is never played: execute=3
    assert plan.calls == 2 and chunker.replanned.tolist() == [True, True]


def test_execute_defaults_to_the_whole_horizon():
    chunker, plan = ActionChunker(H), StubPlanner()
    assert [play(chunker, plan)[0] for _ in range(H + 1)] == [1000, 1001, 1002, 1003, 2000]


@pytest.mark.parametrize("ids", [torch.tensor([1]), torch.tensor([False, True])], ids=["index", "mask"])
def test_reset_replans_only_that_env(ids):
    chunker, plan = ActionChunker(H, execute=3), StubPlanner()
    assert play(chunker, plan) == [1000, 1010]
    chunker.reset(ids)  # env 1's episode ended
    assert play(chunker, plan) == [1001, 2010]  # env 0 continues its chunk, env 1 plays the new one from h=0
    assert chunker.replanned.tolist() == [False, True]
    assert play(chunker, plan) == [1002, 2011]
    assert plan.calls == 2
    assert play(chunker, plan) == [3000, 2012]  # env 0's queue ran out: only it takes plan 3
    assert play(chunker, plan) == [3001, 4010]  # and now env 1's
    assert plan.calls == 4


def test_reset_of_all_and_before_any_plan():
    chunker, plan = ActionChunker(H, execute=2), StubPlanner()
    chunker.reset(torch.tensor([True, False]))  # nothing planned yet: a no-op
    assert play(chunker, plan) == [1000, 1010]
    chunker.reset(torch.tensor([True, True]))
    assert play(chunker, plan) == [2000, 2010]
    chunker.reset()
    assert play(chunker, plan) == [3000, 3010]


def test_bad_shapes_are_errors():
    with pytest.raises(ValueError, match="execute <= horizon"):
        ActionChunker(4, execute=5)
    chunker, plan = ActionChunker(H), StubPlanner()
    play(chunker, plan)
    with pytest.raises(ValueError, match="reset mask"):
        chunker.reset(torch.tensor([True, False, True]))
    chunker.reset(torch.tensor([0]))
    with pytest.raises(ValueError, match="batch size changes"):
        chunker.act(lambda: torch.zeros(3, H, A))
    with pytest.raises(ValueError, match=r"\[N, 4, A\]"):
        ActionChunker(H).act(lambda: torch.zeros(2, H + 1, A))


def test_policy_act_plays_its_chunk_open_loop_until_reset():
    torch.manual_seed(0)
    policy = MLPPolicy(3, 2, horizon=4, execute=2, hidden=(16,))
    obs_a, obs_b = torch.randn(2, 3), torch.randn(2, 3)
    chunk_a = policy.predict_chunk(obs_a, deterministic=True)
    chunk_b = policy.predict_chunk(obs_b, deterministic=True)
    torch.testing.assert_close(policy.act({"state": obs_a}, deterministic=True), chunk_a[:, 0])
    # The second action comes from the first observation's chunk, whatever is observed now.
    torch.testing.assert_close(policy.act({"state": obs_b}, deterministic=True), chunk_a[:, 1])
    policy.reset(torch.tensor([0]))
    mixed = policy.act({"state": obs_b}, deterministic=True)
    torch.testing.assert_close(mixed[0], chunk_b[0, 0])
    torch.testing.assert_close(mixed[1], chunk_b[1, 0])  # env 1's queue was empty too (execute=2)
