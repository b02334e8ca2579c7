"""A policy trained without a delay, deployed under one: the final checkpoint of a run (trained with no env_delay)
evaluated on 100 deterministic episodes with a 5-step observation-to-action delay, as ``robot-rl eval run=`` would
with its run's own settings otherwise (same seeds). Prints the one result line, as eval_latest.txt holds it.

    python bench/results/delay_arm/eval_under_delay.py RUN_DIR [STEPS]
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

from robot_rl import checkpoint
from robot_rl.config import load_run_config
from robot_rl.evaluation import MAX_EVAL_ENVS, evaluate
from robot_rl.trainer import EVAL_SEED_OFFSET, build_agent, make_env


def main(run_dir: str, steps: int = 5, episodes: int = 100) -> None:
    torch.set_num_threads(1)
    cfg = load_run_config(Path(run_dir))
    if cfg.env_delay.to_delay() is not None:
        raise SystemExit(f"{run_dir} was trained under a delay already")
    state = checkpoint.load(Path(run_dir) / "checkpoints" / "latest.pt")
    with make_env(cfg, min(episodes, MAX_EVAL_ENVS)) as plain:
        agent = build_agent(cfg, plain)  # the networks as trained (no in-flight actions in the input)
    agent.load_state_dict(state["agent"])
    cfg.env_delay.steps = steps
    with make_env(cfg, min(episodes, MAX_EVAL_ENVS)) as env:
        result = evaluate(lambda o: agent.act(o, deterministic=True).to(env.device), env,
                          seed=cfg.seed + EVAL_SEED_OFFSET, episodes=episodes)
    print(f"{cfg.env.spec} | latest checkpoint (env step {state['env_steps']:,}) under a {steps}-step delay | "
          f"{episodes} episodes | return {result['eval_return_mean']:.2f} ± {result['eval_return_std']:.2f} | "
          f"success rate {result['success_rate']:.0%}")


if __name__ == "__main__":
    main(sys.argv[1], *(int(v) for v in sys.argv[2:]))
