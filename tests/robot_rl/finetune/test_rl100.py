"""RL-100's gated offline rounds (`robot_rl.finetune.rl100`, `robot-rl finetune method=rl100`): the OPE gate keeps the
current policy against a sabotaged candidate and takes a clearly better one, decision windows, one-line config
errors, and a tiny run end to end through the CLI with its rounds file, policy directory and resume."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from robot_rl.envs.arm.experts import make_expert
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.io import load_policy, save_policy

from robot_rl import envs
from robot_rl.bc import chunk_pairs
from robot_rl.cli import main
from robot_rl.evaluation import evaluate
from robot_rl.finetune.rl100 import (
    RL100,
    ROUNDS_FILE,
    RL100Config,
    concat_data,
    decision_windows,
    gate,
    start_states,
)

SPEC = "arm:reach-sparse"
T = 40  # reach's expert needs about 20 steps


def sabotaged(policy: MLPPolicy) -> MLPPolicy:
    """A copy whose last layer outputs zero: one constant action everywhere (the middle of the demos' range)."""
    bad = copy.deepcopy(policy)
    last = [m for m in bad.net if isinstance(m, torch.nn.Linear)][-1]
    torch.nn.init.zeros_(last.weight)
    torch.nn.init.zeros_(last.bias)
    return bad


@pytest.fixture(scope="module")
def reach() -> dict:
    """A BC policy of the arm's expert on reach (about 60% success in 40 steps), its sabotaged copy, and a critic
    fitted on both policies' rollouts (each round's states are its own policy's)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a module fixture runs before the autouse one_thread of conftest.py
    try:
        yield make_reach()
    finally:
        torch.set_num_threads(threads)


def make_reach(seed: int = 0, mixed: bool = True) -> dict:
    torch.manual_seed(seed)
    env = envs.make(SPEC, num_envs=8, max_episode_steps=T, seed=0)
    expert = make_expert(SPEC, 8, seed=0)
    obs, states, actions = env.reset(seed=0), [], []
    for _ in range(T):
        a = expert.act(obs)
        states.append(obs["state"])
        actions.append(a)
        obs, *_ = env.step(a)
    s, a = torch.stack(states, 1).flatten(0, 1), torch.stack(actions, 1).flatten(0, 1)
    good = MLPPolicy(s.shape[1], a.shape[1], horizon=4, execute=2, hidden=[64, 64])
    good.fit_normalization(s, a)
    o, c = chunk_pairs(s, a, torch.full((8,), T), 4)
    opt = torch.optim.Adam(good.parameters(), lr=1e-3)
    for _ in range(300):
        i = torch.randint(0, o.shape[0], (128,))
        loss = good.loss(o[i], c[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
    good.eval()
    bad = sabotaged(good)
    cfg = RL100Config(episodes_per_round=8, ope_steps=600, critic_hidden=[64, 64], batch_size=128, collect_noise=0.1,
                      critic_lr=1e-3)
    method = RL100(cfg, good, env)
    data = method.data
    for rnd, policy in ((1, good), (2, bad)) if mixed else ((1, good),):
        method.round = rnd - 1
        rollouts, _ = method.collect(policy, 8, seed=100 + rnd)
        data = concat_data(data, rollouts)
    success = {}
    for name, p in (("good", good), ("bad", bad)):
        p.reset()
        success[name] = evaluate(lambda x, p=p: p.act(x, deterministic=True), env, seed=7, on_done=p.reset)["success_rate"]
    env.close()
    return {"good": good, "bad": bad, "cfg": cfg, "data": data, "success": success,
            "windows": decision_windows(data, good.execute, cfg.gamma), "starts": start_states(data)}


def test_the_sabotaged_candidate_is_really_worse(reach) -> None:
    assert reach["success"]["good"] >= 0.4 and reach["success"]["bad"] == 0.0, reach["success"]


def test_gate_rejects_a_sabotaged_candidate_and_keeps_the_current_policy(reach) -> None:
    decision = gate(reach["windows"], reach["starts"], reach["good"], reach["bad"], reach["cfg"], 2)
    assert not decision["accepted"] and decision["ope_candidate"] < decision["ope_current"], decision


def test_gate_accepts_a_clearly_better_candidate_unless_the_margin_is_larger_than_the_gain(reach) -> None:
    decision = gate(reach["windows"], reach["starts"], reach["bad"], reach["good"], reach["cfg"], 2)
    assert decision["accepted"] and decision["ope_candidate"] > decision["ope_current"], decision
    gain = decision["ope_candidate"] - decision["ope_current"]
    strict = dataclasses.replace(reach["cfg"], margin=gain * 2)
    assert not gate(reach["windows"], reach["starts"], reach["bad"], reach["good"], strict, 2)["accepted"]


def test_decision_windows_sum_rewards_and_stop_at_termination() -> None:
    # one episode of 3 steps that terminates, one of 2 that is truncated; k = 2, gamma = 0.5
    data = {
        "state": torch.arange(5.0)[:, None], "action": torch.arange(5.0)[:, None] * 10,
        "reward": torch.tensor([0.0, 0.0, 1.0, 0.0, 0.0]), "next_state": torch.arange(1.0, 6.0)[:, None],
        "terminated": torch.tensor([False, False, True, False, False]),
        "truncated": torch.tensor([False, False, False, False, True]),
        "length": torch.tensor([3, 2]), "round": torch.tensor([1, 1]), "success": torch.tensor([True, False]),
    }
    w = decision_windows(data, 2, 0.5)
    assert w["reward"].tolist() == [0.0, 0.5, 1.0, 0.0, 0.0]
    assert w["discount"].tolist() == [0.25, 0.0, 0.0, 0.25, 0.5]  # terminated inside: 0; the truncated end bootstraps
    assert w["next_state"][:, 0].tolist() == [2.0, 3.0, 3.0, 5.0, 5.0]
    assert w["action"].tolist() == [[0, 10], [10, 20], [20, 20], [30, 40], [40, 40]]  # the last action repeats


SMALL = ["rl100.episodes_per_round=3", "rl100.critic_steps=20", "rl100.ope_steps=20", "rl100.policy_steps=20", "rl100.batch_size=16",
         "rl100.critic_hidden=[16]"]
COMMON = ["env.spec=" + SPEC, "env.max_episode_steps=12", "env.num_eval_envs=2", "threads=1", "quiet=true"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    with envs.make(SPEC) as env:
        (obs_dim,), act_dim = env.observation_spec["state"][0], env.action_dim
    torch.manual_seed(0)
    return save_policy(MLPPolicy(obs_dim, act_dim, horizon=4, execute=2, hidden=[16]),
                       tmp_path_factory.mktemp("rl100") / "base")


def test_a_tiny_run_writes_its_rounds_and_a_loadable_policy_and_resumes(base, tmp_path, capsys) -> None:
    run_dir = tmp_path / "run"
    args = ["finetune", "method=rl100", f"base_policy={base}", f"run_dir={run_dir}", *COMMON, *SMALL]
    assert main([*args, "rl100.rounds=1"]) == 0, capsys.readouterr().err
    rounds = json.loads((run_dir / ROUNDS_FILE).read_text())
    assert rounds["rounds_done"] == 1 and len(rounds["rounds"]) == 1
    first = rounds["rounds"][0]
    for key in ("ope_current", "ope_candidate", "accepted", "success_current", "success_candidate", "success_after"):
        assert key in first, key
    assert isinstance(load_policy(run_dir / "policy"), MLPPolicy)
    capsys.readouterr()
    assert main(["eval", f"policy={run_dir / 'policy'}", f"env.spec={SPEC}", "episodes=2"]) == 0
    assert "success rate" in capsys.readouterr().out
    # resume: one more round on the saved dataset (3 episodes in, 6 after), the first round's record kept
    assert main(["finetune", f"resume={run_dir}", "rl100.rounds=2"]) == 0, capsys.readouterr().err
    rounds = json.loads((run_dir / ROUNDS_FILE).read_text())
    assert [r["round"] for r in rounds["rounds"]] == [1, 2] and rounds["rounds"][0] == first
    assert rounds["rounds"][1]["dataset_episodes"] == 6
    lines = (run_dir / "metrics.csv").read_text().strip().splitlines()
    assert len(lines) == 1 + 3  # the BC policy at step 0, then one row per round
    capsys.readouterr()
    assert main(["eval", f"run={run_dir}", "episodes=2", "video=false"]) == 0, capsys.readouterr().err
    assert "rl100 fine-tuning" in capsys.readouterr().out
    assert main(["export", f"run={run_dir}", f"out={tmp_path / 'exported'}"]) == 0, capsys.readouterr().err
    assert isinstance(load_policy(tmp_path / "exported"), MLPPolicy)
    # a checkpoint file too (a run stopped before its first round has no policy/ yet): the accepted policy's weights
    ckpt = run_dir / "checkpoints" / "latest.pt"
    assert main(["export", f"run={ckpt}", f"out={tmp_path / 'from_ckpt'}"]) == 0, capsys.readouterr().err
    exported, saved = load_policy(tmp_path / "from_ckpt"), load_policy(run_dir / "policy")
    for (name, a), b in zip(exported.state_dict().items(), saved.state_dict().values(), strict=True):
        assert torch.equal(a, b), name


@pytest.mark.parametrize(
    "args, expected",
    [
        (["rl100.rounds=0"], "rl100.rounds must be >= 1"),
        (["rl100.num_critics=1"], "rl100.num_critics must be >= 2"),
        (["rl100.expectile=1.5"], "rl100.expectile must be in [0.5, 1)"),
        (["rl100.roundz=2"], "rl100.roundz"),
        (["data=nowhere"], "nowhere"),
    ],
)
def test_config_errors_are_one_line_naming_the_key(base, tmp_path, capsys, args, expected) -> None:
    code = main(["finetune", "method=rl100", f"base_policy={base}", f"run_dir={tmp_path / 'r'}", *COMMON, *args])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and err.count("\n") == 0, err


def test_a_round_with_a_sabotaged_update_keeps_the_current_policy(reach, monkeypatch) -> None:
    """The whole round (collect, critic, candidate, gate) with the candidate's training replaced by sabotage: the
    gate, which never sees the env, rejects it and the method keeps its policy."""
    import robot_rl.finetune.rl100 as rl100

    def sabotage(policy, *args, **kwargs) -> float:
        last = [m for m in policy.net if isinstance(m, torch.nn.Linear)][-1]
        torch.nn.init.zeros_(last.weight)
        torch.nn.init.zeros_(last.bias)
        return 0.0

    monkeypatch.setattr(rl100, "weighted_bc", sabotage)
    torch.manual_seed(0)
    good = copy.deepcopy(reach["good"])
    before = {k: v.clone() for k, v in good.state_dict().items()}
    cfg = dataclasses.replace(reach["cfg"], critic_steps=50, policy_steps=1)
    with envs.make(SPEC, num_envs=8, max_episode_steps=T, seed=0) as env:
        method = RL100(cfg, good, env)
        method.start(0)
        method.advance()
    record = method.records[0]
    assert not record["accepted"] and record["ope_candidate"] < record["ope_current"], record
    assert method.current is good and all(torch.equal(v, before[k]) for k, v in good.state_dict().items())
