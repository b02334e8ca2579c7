#!/bin/bash
# RLPD with 20 expert demos against SAC from scratch on arm:push-sparse, both with the default agent
# (agent=simba) at the presets' settings otherwise (20k env steps = agent steps, action repeat 1; evaluation every
# 2k env steps on 20 deterministic episodes). The demos: 20 scripted expert episodes (seed 0).
# Usage: run.sh rlpd|sac SEED [SEED...]   (one run after another; two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/push_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 \
  out=data/push_demos seed=0
kind=$1; shift
mkdir -p runs/push_rlpd
for seed in "$@"; do
  .venv/bin/robot-rl train experiment=${kind}_push agent=simba threads=1 quiet=true seed=$seed \
    run_dir=runs/push_rlpd/${kind}_s$seed > runs/push_rlpd/${kind}_s$seed.log 2>&1
done
