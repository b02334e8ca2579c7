#!/bin/bash
# run.sh's flow students again with 10,000 distillation steps instead of 3,000 (the loss still fell at 3,000).
# Usage: run_long.sh SEED [SEED...]   (after run.sh SEED: it reuses that seed's flow teacher)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
for seed in "$@"; do
  run=runs/distill_push/student_flow_long_s$seed
  [ -f $run/distill_summary.json ] || .venv/bin/robot-rl distill teacher=runs/distill_push/bc_flow_s$seed/policy \
    dataset=data/ft_push_demos steps=10000 threads=1 seed=$seed env.spec=arm:push-sparse eval_episodes=200 \
    latency_repeats=300 run_dir=$run > $run.log 2>&1
done
