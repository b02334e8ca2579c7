"""ChunkRunner: per-env chunk queues, one decision per executed chunk, macro transitions with exact rewards
and discounts, env steps counted as executed actions."""

import pytest
import torch
from scripted_env import ScriptedEnv

from robot_rl.finetune.chunks import ChunkRunner

GAMMA = 0.9


def run(runner: ChunkRunner, steps: int):
    """Plan chunks whose actions encode (env, decision number, position); collect every macro step."""
    macros, planned = [], []
    for _ in range(steps):
        ids = runner.need_ids()
        if ids.numel():
            n = runner.decisions
            chunk = torch.zeros(ids.numel(), 3, 2)
            chunk[..., 0] = ids[:, None].float()
            chunk[..., 1] = torch.arange(3).float()
            runner.plan(ids, chunk, {"decision": torch.arange(n, n + ids.numel())})
            planned.append(ids.tolist())
        result = runner.step()
        if result.macro is not None:
            macros.append(result.macro)
    return macros, planned


def test_decisions_follow_each_env_and_transitions_are_exact() -> None:
    # env 0: episodes of 5 steps (terminated): chunks of 2 play 2, 2, 1; env 1: episodes of 4 (truncated): 2, 2.
    env = ScriptedEnv([5, 4], [True, False])
    runner = ChunkRunner(env, execute=2, gamma=GAMMA)
    runner.reset(seed=0)
    macros, planned = run(runner, 10)
    assert runner.env_steps == 20  # executed actions, not chunks
    # decisions: env 0 at t=0,2,4,5(new episode),7,9; env 1 at 0,2,4,6,8
    assert runner.decisions == 11 and sum(len(p) for p in planned) == 11
    # each executed action came from the env's current chunk, in order, never from a previous episode's chunk
    actions = torch.stack(env.actions)  # [10, 2, 2]
    assert actions[:, 0, 1].tolist() == [0, 1, 0, 1, 0, 0, 1, 0, 1, 0]
    assert actions[:, 1, 1].tolist() == [0, 1] * 5

    by_env = {0: [], 1: []}
    for m in macros:
        for j, e in enumerate(m.env_ids.tolist()):
            fields = ("obs", "reward", "discount", "next_obs", "terminated", "truncated", "length")
            by_env[e].append({k: getattr(m, k)[j] for k in fields})
    assert len(by_env[0]) == 6 and len(by_env[1]) == 5  # env 0's second episode also ends at step 10
    e0 = by_env[0]
    # the third chunk of env 0's first episode: one action (reward 5) then termination: no bootstrap
    assert e0[2]["length"] == 1 and e0[2]["reward"] == pytest.approx(5.0) and e0[2]["discount"] == 0.0
    assert e0[2]["terminated"] and e0[2]["next_obs"][1] == 5  # the true final state, not the reset one
    # a full chunk: rewards 1 and 2 -> 1 + 0.9 * 2, discount 0.9^2
    assert e0[0]["reward"] == pytest.approx(1 + GAMMA * 2) and e0[0]["discount"] == pytest.approx(GAMMA**2)
    assert e0[3]["obs"][2] == 1 and e0[3]["obs"][1] == 0  # the next episode's first chunk starts at its start
    e1 = by_env[1]
    # env 1's time limit: truncated, bootstraps from the final state with gamma^2
    assert e1[1]["truncated"] and not e1[1]["terminated"] and e1[1]["discount"] == pytest.approx(GAMMA**2)
    assert e1[1]["next_obs"][1] == 4


def test_payload_rows_come_back_with_their_chunk() -> None:
    env = ScriptedEnv([3, 3, 3], [True, True, True])
    runner = ChunkRunner(env, execute=3, gamma=1.0)
    runner.reset()
    macros, _ = run(runner, 6)
    decisions = torch.cat([m.payload["decision"] for m in macros])
    assert sorted(decisions.tolist()) == list(range(6))
    assert all(m.reward.tolist() == [6.0] * m.env_ids.numel() for m in macros)


def test_misuse_is_an_error() -> None:
    runner = ChunkRunner(ScriptedEnv([3], [True]), execute=2, gamma=0.99)
    runner.reset()
    with pytest.raises(RuntimeError, match="plan"):
        runner.step()
    with pytest.raises(ValueError, match="chunk must be"):
        runner.plan(torch.tensor([0]), torch.zeros(1, 1, 2))
    runner.plan(torch.tensor([0]), torch.zeros(1, 2, 2))
    with pytest.raises(ValueError, match="still playing"):
        runner.plan(torch.tensor([0]), torch.zeros(1, 2, 2))


def test_features_are_computed_only_for_envs_whose_chunk_completed() -> None:
    # A camera base's features cost an encoder pass per row: rows are computed at reset, then for the final and
    # the new observation of each completed chunk, never for envs in the middle of one (was: every env, every step).
    rows = []

    def features(obs: dict) -> torch.Tensor:
        rows.append(obs["state"].shape[0])
        return obs["state"].float() * 10

    env = ScriptedEnv([7, 9], [True, False])
    runner = ChunkRunner(env, execute=3, gamma=GAMMA, features=features)
    runner.reset(seed=0)
    macros, planned = run(runner, 12)
    completed = sum(m.env_ids.numel() for m in macros)
    assert sum(rows) == 2 + 2 * completed < 2 * 12
    # decisions are still made on the features of the observation they start from (x10 marks the features)
    starts = torch.cat([m.obs for m in macros])
    assert starts[:, 0].tolist() == torch.cat([10 * m.env_ids.float() for m in macros]).tolist()
    assert sorted(set(starts[:, 1].tolist())) == [0, 30, 60]  # each chunk starts at t = 0, 3, 6 of its episode
