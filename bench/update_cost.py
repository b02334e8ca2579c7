"""What the learner costs per environment step: the default agent's variants against SB3's SAC, one thread.

Why: the sample-efficiency benchmark (`bench/sample_efficiency.py`) measures whole runs, where the learner,
the simulator, evaluation and the machine's load all count. This isolates the part the agent decides: the
update work one environment step brings with it. For robot_rl's default agent (`configs/agent/simba.yaml`:
two hyperspherical critics 128 wide with a 4x inverted bottleneck, 101 atoms, UTD 2, batch 256) that is one
`agent.update` (2 critic updates, 1 actor and temperature update); for `agent=sac` (two 256x256 LayerNorm
critics, UTD 1) the same call with one critic update; for SB3's SAC at its defaults (two 256x256 critics, one
gradient step per env step) `model.train(gradient_steps=1, batch_size=256)`.

Variants of the default agent: fp32 eager (what the benchmark ran), `agent.optimiser.compile=true` (torch.compile of the
two losses), `agent.optimiser.bf16=true` (bfloat16 autocast of the networks), both, and one critic instead of two (SimbaV2's
critic on tasks without terminations, where it drops clipped double Q), in fp32 and with compile + bf16, one critic
update per env step instead of two (`agent.optimiser.utd=1`), and batches of 16 instead of 256, eager and compiled: there the
matmuls cost next to nothing, so what remains is the part of the update that does not grow with the batch (op
dispatch, optimiser steps, weight projections). `--variants` picks some by name. Batches are sampled from a replay of random
data (the cost does not depend on what is stored). FLOPs are counted on each eager fp32 update
(`torch.utils.flop_counter`: matmuls, forward and backward; compile and bf16 do the eager update's matmuls).

The default agent, the variants and SB3 run interleaved in rounds (`--rounds`), so a change in the machine's
load reaches all of them; the table gives medians over rounds and the ratio to SB3 of the same round.
Writes ``bench/results/<date>-update-cost.json``. ``--task walker2d`` uses Walker2d's sizes (17 obs, 6 actions).
"""

from __future__ import annotations

import argparse
import re
import time
from typing import Any

import torch

from bench import common
from bench.learner import count_flops
from robot_rl.agents.sac import SAC
from robot_rl.config import compose_train_config
from robot_rl.replay import ReplayBuffer

SIZES = {"hopper": ("Hopper-v5", 11, 3), "walker2d": ("Walker2d-v5", 17, 6), "halfcheetah": ("HalfCheetah-v5", 17, 6)}
BATCH = 256
VARIANTS = {
    "default fp32": [],
    "default compile": ["agent.optimiser.compile=true"],
    "default bf16": ["agent.optimiser.bf16=true"],
    "default compile+bf16": ["agent.optimiser.compile=true", "agent.optimiser.bf16=true"],
    "default, 1 critic": ["agent.critic.num=1", "agent.critic.num_target=1"],
    "default, 1 critic, compile+bf16": ["agent.critic.num=1", "agent.critic.num_target=1", "agent.optimiser.compile=true",
                                        "agent.optimiser.bf16=true"],
    # SimbaV2's schedule: an actor and temperature step after each of the two critic updates, not one after both
    "default, actor each update": ["agent.optimiser.actor_each_update=true"],
    "default, 1 critic, actor each update": ["agent.critic.num=1", "agent.critic.num_target=1",
                                             "agent.optimiser.actor_each_update=true"],
    "agent=sac (UTD 1)": ["agent=sac"],
    # one critic update per env step instead of two (SimbaV2 reports UTD 1 too)
    "default, UTD 1": ["agent.optimiser.utd=1"],
    # at batch 16 the matmuls are nearly free: what is left is the work that does not grow with the batch (op
    # dispatch, optimiser steps, weight projections, target updates), eager and compiled
    "default fp32, batch 16": ["agent.optimiser.batch_size=16"],
    "default compile, batch 16": ["agent.optimiser.compile=true", "agent.optimiser.batch_size=16"],
}


def random_replay(obs_dim: int, act_dim: int, size: int = 20_000) -> ReplayBuffer:
    envs = 1000
    replay = ReplayBuffer(size, envs, {"state": ((obs_dim,), torch.float32)}, act_dim)
    for _ in range(size // envs):
        replay.add({"state": torch.randn(envs, obs_dim)}, torch.rand(envs, act_dim) * 2 - 1, torch.randn(envs),
                   {"state": torch.randn(envs, obs_dim)}, torch.rand(envs) < 0.001,
                   torch.zeros(envs, dtype=torch.bool))
    return replay


def ours_step(overrides: list[str], obs_dim: int, act_dim: int, replay: ReplayBuffer) -> tuple[Any, float, Any]:
    """(one env step's learner work, seconds of its first call (compilation), the agent config)."""
    cfg = compose_train_config(overrides).agent
    agent = SAC(obs_dim, act_dim, cfg)
    agent.observe({"state": torch.randn(8, obs_dim)}, torch.randn(8), torch.zeros(8, dtype=torch.bool))

    def step() -> None:
        agent.learn(replay)

    t0 = time.perf_counter()
    step()
    return step, time.perf_counter() - t0, cfg


def sb3_step(env_id: str) -> Any:
    from bench.sb3 import fill_random, make_sac

    model = make_sac(env_id, seed=0, device="cpu")
    fill_random(model, 20_000)
    return lambda: model.train(gradient_steps=1, batch_size=BATCH)


def selected(pattern: str | None) -> dict[str, list[str]]:
    """The variants whose names match the regular expression `pattern` (all without one)."""
    if pattern is None:
        return dict(VARIANTS)
    chosen = {name: o for name, o in VARIANTS.items() if re.search(pattern, name)}
    if not chosen:
        raise SystemExit(f"--variants {pattern!r} matches none of: {'; '.join(VARIANTS)}")
    return chosen


def run(task: str, rounds: int, calls: int, variants: dict[str, list[str]] | None = None) -> dict[str, Any]:
    env_id, obs_dim, act_dim = SIZES[task]
    replay = random_replay(obs_dim, act_dim)
    variants = VARIANTS if variants is None else variants
    steps, first_call_s, flops, configs = {}, {}, {}, {}
    eager_flops: dict[tuple[str, ...], float] = {}  # compile and bf16 do their eager fp32 twin's matmuls
    for name, overrides in variants.items():
        steps[name], first_call_s[name], cfg = ours_step(overrides, obs_dim, act_dim, replay)
        configs[name] = {"overrides": overrides, "utd": cfg.optimiser.utd, "network": cfg.network.kind}
        eager = tuple(o for o in overrides if o not in ("agent.optimiser.compile=true", "agent.optimiser.bf16=true"))
        if eager not in eager_flops:
            step = steps[name] if list(eager) == overrides else ours_step(list(eager), obs_dim, act_dim, replay)[0]
            eager_flops[eager] = count_flops(step)
        flops[name] = eager_flops[eager]
    steps["sb3"] = sb3_step(env_id)
    flops["sb3"] = count_flops(steps["sb3"])
    times = common.interleaved_times(steps, rounds, calls)
    sb3_ms = common.median(times["sb3"]) * 1e3
    rows = []
    for name in variants:
        ms = common.median(times[name]) * 1e3
        fl = flops[name]
        rows.append(common.row(
            f"learner work per env step ({task} sizes)", f"ms, robot_rl {name}", ms, sb3_ms,
            ratio_value=common.round_ratio(times, name, "sb3"),
            note=f"{fl / 1e9:.2f} GFLOP vs SB3 {flops['sb3'] / 1e9:.2f}; first call {first_call_s[name]:.1f} s",
        ))
    return {
        "config": {"task": task, "env_id": env_id, "obs_dim": obs_dim, "action_dim": act_dim, "batch": BATCH,
                   "rounds": rounds, "calls_per_round": calls, "variants": configs,
                   "sb3": "SAC('MlpPolicy') defaults; model.train(gradient_steps=1, batch_size=256)"},
        "ms_per_env_step": {n: [t * 1e3 for t in ts] for n, ts in times.items()},
        "gflop_per_env_step": {n: f / 1e9 for n, f in flops.items()},
        "first_call_s": first_call_s,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", default="hopper", choices=sorted(SIZES))
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of every variant and SB3")
    p.add_argument("--calls", type=int, default=50, help="env steps timed per variant and round")
    p.add_argument("--threads", type=int, default=1, help="torch CPU threads (the benchmark's runs use 1)")
    p.add_argument("--out", default=None, help="results file (default bench/results/<date>-update-cost.json)")
    p.add_argument("--variants", default=None, help="only the variants whose names match this regular expression, "
                   "e.g. 'fp32|UTD 1|batch 16' (bf16 variants take 15x longer on a CPU without bf16 instructions)")
    args = p.parse_args(argv)
    variants = selected(args.variants)
    torch.set_num_threads(args.threads)
    part = run(args.task, args.rounds, args.calls, variants)
    part["machine"] = common.machine_info(args.threads, "cpu")
    print(common.markdown_table(part["rows"], common.ROW_COLUMNS))
    out = common.write_json(common.Path(args.out) if args.out else common.results_path("update-cost"), part)
    print(f"wrote {out}")
    return part


if __name__ == "__main__":
    main()
