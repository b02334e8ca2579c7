"""(b) Learner throughput at RLPD settings: updates/s of `SAC.update` (10 LayerNorm critics, UTD 8, batch 256,
256x256 networks; HalfCheetah's 17-d observations and 6-d actions) on batches from a ReplayBuffer of random
data, the FLOPs of one update, and the fraction of the machine's matrix rate that achieves.

Method: one `agent.update(replay.sample(8 * 256).reshape(8, 256))` -- exactly the trainer's inner loop: 8
critic updates, then one actor and one temperature update -- is timed back to back, median over repeats.
Its FLOPs are counted by torch.utils.flop_counter.FlopCounterMode (matmuls, forward and backward; the
elementwise and optimiser work is not counted, so achieved GFLOP/s is a lower bound of the work done). The
machine's matrix rate, the "floor" the fraction is taken of, is measured in the same run: the best rate of
square `torch.mm` in fp32 (and in bf16, reported alongside) over a few sizes. SB3 is a peer row at its own
defaults (two 256x256 critics without LayerNorm): `model.train(gradient_steps=8, batch_size=256)`, the
same 8 critic updates (with an actor update after each, as SB3 does) on its own replay buffer.
"""

from __future__ import annotations

import time
from typing import Any

import torch
from torch.utils.flop_counter import FlopCounterMode

from bench import common
from robot_rl.agents.sac import SAC
from robot_rl.config import compose_train_config
from robot_rl.replay import ReplayBuffer

OBS_DIM, ACT_DIM = 17, 6  # HalfCheetah-v5
UTD, BATCH = 8, 256
REPLAY = 100_000  # random transitions: sampling cost depends on batch size, not on what is stored


def matmul_floor(device: str, quick: bool) -> dict[str, Any]:
    """GFLOP/s of square fp32/bf16 `torch.mm` at a few sizes; the best per dtype is the floor."""
    rates: dict[str, dict[int, float]] = {}
    for dtype in (torch.float32, torch.bfloat16):
        name = str(dtype).removeprefix("torch.")
        rates[name] = {}
        for n in (256, 1024, 2048):
            a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
            (t1,) = common.time_per_call(lambda a=a, b=b: torch.mm(a, b), 1, 1, device)
            calls = max(1, int((0.05 if quick else 0.25) / t1))  # each repeat long enough to time
            # Best (not median) of the repeats: a loaded machine only ever slows a matmul down.
            best = min(common.time_per_call(lambda a=a, b=b: torch.mm(a, b), calls, 3 if quick else 7, device))
            rates[name][n] = 2 * n**3 / best / 1e9
    return {"gflops": rates, "floor_gflops": {k: max(v.values()) for k, v in rates.items()}}


def count_flops(fn: Any) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


def random_replay(device: str) -> ReplayBuffer:
    envs = 1000  # written as 1000 envs x 100 steps: 100 adds instead of 100,000 (sampling is uniform anyway)
    replay = ReplayBuffer(REPLAY, envs, {"state": ((OBS_DIM,), torch.float32)}, ACT_DIM, device=device)
    for _ in range(REPLAY // envs):
        replay.add({"state": torch.randn(envs, OBS_DIM)}, torch.rand(envs, ACT_DIM) * 2 - 1, torch.randn(envs),
                   {"state": torch.randn(envs, OBS_DIM)}, torch.rand(envs) < 0.001, torch.zeros(envs, dtype=torch.bool))
    return replay


def rlpd_overrides(extra: list[str]) -> list[str]:
    # The agent=rlpd preset, with the figures the benchmark is defined by spelled out.
    return ["agent=rlpd", f"agent.optimiser.utd={UTD}", f"agent.optimiser.batch_size={BATCH}", "agent.critic.num=10",
            "agent.network.critic_layer_norm=true", "agent.network.hidden_dims=[256,256]", *extra]


def bench_ours(device: str, extra: list[str], quick: bool, replay: Any) -> dict[str, Any]:
    cfg = compose_train_config(rlpd_overrides(extra)).agent
    agent = SAC(OBS_DIM, ACT_DIM, cfg, device=device)

    def step() -> None:
        agent.update(replay.sample(BATCH * UTD).reshape(UTD, BATCH))

    t0 = time.perf_counter()
    step()  # the first call pays for torch.compile where it is on; timed apart
    first_s = time.perf_counter() - t0
    secs = common.time_per_call(step, 5 if quick else 30, 3 if quick else 7, device)
    return {"agent_config": cfg.__dict__, "first_call_s": first_s, "s_per_update_call": secs}


def bench_sb3(device: str, quick: bool) -> dict[str, Any]:
    from bench.sb3 import fill_random, make_sac

    model = make_sac("HalfCheetah-v5", seed=0, device=device)
    fill_random(model, REPLAY // 2)

    def step() -> None:
        model.train(gradient_steps=UTD, batch_size=BATCH)

    flops = count_flops(step)
    secs = common.time_per_call(step, 5 if quick else 30, 3 if quick else 7, device)
    return {"flops_per_call": flops, "s_per_update_call": secs}


def run(quick: bool, threads: int, device: str, variants: dict[str, list[str]], unavailable: list[str],
        sb3: bool = True) -> dict[str, Any]:
    floor = matmul_floor(device, quick)
    fp32_floor, bf16_floor = floor["floor_gflops"]["float32"], floor["floor_gflops"]["bfloat16"]
    replay = random_replay(device)
    # FLOPs of the eager fp32 update: compile and bf16 do the same matmuls, so the count is theirs too.

    agent = SAC(OBS_DIM, ACT_DIM, compose_train_config(rlpd_overrides([])).agent, device=device)
    flops = count_flops(lambda: agent.update(replay.sample(BATCH * UTD).reshape(UTD, BATCH)))

    ours = {name: bench_ours(device, extra, quick, replay) for name, extra in variants.items()}
    peer = bench_sb3(device, quick) if sb3 else None
    results: dict[str, Any] = {"matmul": floor, "flops_per_update_call": flops, "robot_rl": {}, "sb3": peer}
    rows = []
    bench_name = "(b) learner, RLPD: 10 LN critics, UTD 8, batch 256"
    sb3_gflops = None
    if peer:
        sb3_gflops = peer["flops_per_call"] / common.median(peer["s_per_update_call"]) / 1e9
        peer.update(gflops=sb3_gflops, critic_updates_per_s=UTD / common.median(peer["s_per_update_call"]),
                    fraction_of_fp32_floor=sb3_gflops / fp32_floor)
    for name, r in ours.items():
        s = common.median(r["s_per_update_call"])
        gflops = flops / s / 1e9
        floor_for = bf16_floor if name == "bf16" else fp32_floor
        r.update(critic_updates_per_s=UTD / s, update_calls_per_s=1 / s, gflops=gflops,
                 fraction_of_fp32_floor=gflops / fp32_floor, fraction_of_own_dtype_floor=gflops / floor_for)
        results["robot_rl"][name] = r
        first = not rows  # the notes once, on the fp32 rows
        rows.append(common.row(bench_name, f"critic updates/s, robot_rl {name}", UTD / s,
                               peer["critic_updates_per_s"] if peer else None, compare=False,
                               note=f"{flops / 1e9:.1f} GFLOP per update() (8 critic + 1 actor update); SB3 "
                                    "peer at its defaults (2 critics, no LN): not the same work" if first else ""))
        rows.append(common.row(bench_name, f"achieved GFLOP/s, robot_rl {name}", gflops, sb3_gflops))
        note = f"floor {fp32_floor:.0f} GFLOP/s fp32, {bf16_floor:.0f} bf16 (this run)" if first else ""
        if name == "bf16":
            note = f"{gflops / bf16_floor:.2f} of the bf16 floor"
        rows.append(common.row(bench_name, f"fraction of fp32 matmul floor, robot_rl {name}", gflops / fp32_floor,
                               peer["fraction_of_fp32_floor"] if peer else None,
                               target="≥ 0.6" if name == "fp32" else "", note=note))
    return {
        "config": {"obs_dim": OBS_DIM, "action_dim": ACT_DIM, "utd": UTD, "batch_size": BATCH, "replay": REPLAY,
                   "torch_threads": threads, "device": device, "robot_rl_overrides": rlpd_overrides([]),
                   "variants": variants, "variants_unavailable": unavailable,
                   "sb3": f"SAC('MlpPolicy', HalfCheetah-v5) defaults; model.train(gradient_steps={UTD}, "
                          f"batch_size={BATCH})" if sb3 else None},
        "results": results,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--no-sb3", action="store_true", help="skip the SB3 peer row")
    args = p.parse_args(argv)
    threads = common.setup(args)
    return common.finish(args, run(args.quick, threads, args.device, *common.variants(args), sb3=not args.no_sb3))


if __name__ == "__main__":
    main()
