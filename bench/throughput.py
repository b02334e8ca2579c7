"""(a) Training throughput, env steps/s, robot_rl against SB3 at identical settings (SB3's SAC defaults) on
HalfCheetah-v5: 1 env, UTD 1, batch 256, two 256x256 critics without LayerNorm, learned temperature from 1.0.

Method: each run takes `learning_starts` uniform-random steps, then K steps with one gradient update each. The
clock runs from the end of the first learning step to the end of the last one, so environment construction,
the random warm-up and evaluation are all outside it; steps/s = K / elapsed. The libraries alternate (order
swapped every round) so that drifting machine load hits both alike; the figure is the median over rounds.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from bench import common
from robot_rl.config import compose_train_config

ENV_ID = "HalfCheetah-v5"
LEARNING_STARTS = 100
OURS_FIRST_UPDATE = max(LEARNING_STARTS, 256)  # robot_rl updates once the replay holds one batch
SB3_SETTINGS = "stable_baselines3.SAC('MlpPolicy', gym.make('HalfCheetah-v5')) with its defaults (bench/sb3.py)"


def ours_overrides(steps: int, seed: int, threads: int, device: str) -> list[str]:
    """robot_rl set, key by key, to SB3's SAC defaults (bench/sb3.py: SB3_SAC_DEFAULTS)."""
    return [
        f"env.spec=gym:{ENV_ID}", "env.num_envs=1", "env.num_eval_envs=1",
        "agent.network.hidden_dims=[256,256]", "agent.critic.num=2", "agent.critic.num_target=2",
        "agent.network.critic_layer_norm=false", "agent.network.actor_layer_norm=false", "agent.optimiser.utd=1", "agent.optimiser.batch_size=256",
        "agent.critic.gamma=0.99", "agent.critic.n_step=1", "agent.critic.tau=0.005", "agent.optimiser.actor_lr=3e-4", "agent.optimiser.critic_lr=3e-4",
        "agent.optimiser.temperature_lr=3e-4", "agent.exploration.init_temperature=1.0", "agent.exploration.target_entropy_scale=1.0",
        "agent.critic.backup_entropy=true", "agent.optimiser.critic_weight_decay=0.0",
        f"train.learning_starts={LEARNING_STARTS}", "train.replay_capacity=1000000", f"train.steps={steps}",
        f"train.eval_every={common.NEVER}", f"train.checkpoint_every={common.NEVER}", "train.video=false",
        f"seed={seed}", f"threads={threads}", f"device={device}", "quiet=true",
    ]


def run_ours(k: int, seed: int, threads: int, device: str, extra: list[str]) -> float:
    # robot_rl's first update waits for a full batch in the replay (SB3 samples 256 of its first 100 with
    # replacement), so its timed window starts at step 256 instead of 100: run that much longer.
    cfg = compose_train_config(ours_overrides(OURS_FIRST_UPDATE + k, seed, threads, device) + extra)
    with tempfile.TemporaryDirectory(prefix="bench-throughput-") as run_dir:
        t = common.run_trainer(common.TimedTrainer(cfg, Path(run_dir), stop_at_first_eval=True))
    # The first eval fires once train.steps is reached, right after the last update.
    return (t.env_steps - t.first_update_step) / (t.first_eval_t - t.first_update_done_t)


def run_sb3(k: int, seed: int, device: str) -> float:
    from bench.sb3 import Probe, make_sac

    model = make_sac(ENV_ID, seed, device)
    probe = Probe(LEARNING_STARTS)
    model.learn(total_timesteps=LEARNING_STARTS + k, callback=probe)
    end = time.monotonic()
    # SB3 trains after steps LEARNING_STARTS+1 .. +k: k env steps and k updates since the probe's clock.
    return k / (end - probe.learning_start_t)


def run(quick: bool, threads: int, device: str, variants: dict[str, list[str]], unavailable: list[str],
        rounds: int | None = None, k: int | None = None) -> dict[str, Any]:
    rounds = rounds or (2 if quick else 3)
    k = k or (300 if quick else 1500)
    rates: dict[str, list[float]] = {f"robot_rl {v}": [] for v in variants} | {"sb3": []}
    for r in range(rounds):
        for who in (["ours", "sb3"] if r % 2 == 0 else ["sb3", "ours"]):
            if who == "sb3":
                rates["sb3"].append(run_sb3(k, seed=r, device=device))
            else:
                for name, extra in variants.items():
                    rates[f"robot_rl {name}"].append(run_ours(k, r, threads, device, extra))
        print(f"  [throughput] round {r + 1}/{rounds}: " + ", ".join(f"{n} {v[-1]:.1f}" for n, v in rates.items()),
              flush=True)
    med = {n: common.median(v) for n, v in rates.items()}
    note = f"median of {rounds} rounds × {k} steps"
    rows = [common.row("(a) HalfCheetah-v5, SB3 SAC defaults", f"env steps/s, robot_rl {name}",
                       med[f"robot_rl {name}"], med["sb3"], target="≥ 2×" if name == "fp32" else "", note=note)
            for name in variants]
    return {
        "config": {"env": ENV_ID, "rounds": rounds, "steps_timed_per_run": k, "learning_starts": LEARNING_STARTS,
                   "torch_threads": threads, "device": device, "sb3": SB3_SETTINGS,
                   "robot_rl_overrides": ours_overrides(OURS_FIRST_UPDATE + k, 0, threads, device),
                   "variants": variants, "variants_unavailable": unavailable,
                   "seeds": "round index, for both libraries"},
        "results": {"env_steps_per_s": rates, "median": med,
                    "ratio_fp32": common.ratio(med["robot_rl fp32"], med["sb3"])},
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 3; 2 with --quick)")
    p.add_argument("--steps", type=int, default=None, help="timed steps per run (default 1500; 300 with --quick)")
    args = p.parse_args(argv)
    threads = common.setup(args)
    return common.finish(args, run(args.quick, threads, args.device, *common.variants(args), args.rounds, args.steps))


if __name__ == "__main__":
    main()
