#!/bin/bash
# RLPD from cameras on arm:push-sparse-pixels with 20 expert demos recorded at 48x48 (experiment=rlpd_push_pixels:
# 40k env steps = agent steps, action repeat 1, 1 env; evaluation every 2k env steps on 20 deterministic episodes).
# Usage: run.sh SEED [SEED...]   (one run after another; two invocations side by side on 2 cores). A run that was
# stopped (its checkpoints/latest.pt is written every 4k steps) goes on from its checkpoint when run again.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/push_pixel_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse-pixels policy=expert \
  episodes=20 env.pixel_size=[48,48] out=data/push_pixel_demos seed=0
mkdir -p runs/push_pixels
for seed in "$@"; do
  run=runs/push_pixels/rlpd_s$seed
  if grep -q "^40000," "$run/metrics.csv" 2>/dev/null; then continue; fi
  if [ -f "$run/checkpoints/latest.pt" ]; then
    .venv/bin/robot-rl train resume=$run quiet=true >> $run.log 2>&1
  else
    .venv/bin/robot-rl train experiment=rlpd_push_pixels threads=1 quiet=true seed=$seed run_dir=$run > $run.log 2>&1
  fi
done
