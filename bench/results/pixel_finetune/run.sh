#!/bin/bash
# Residual RL (ResFiT) on flow BC policies from cameras, arm:push-sparse-pixels (two 48x48 cameras).
# The BC starting points are bench/results/pixel_bc/run.sh's (same data, settings and seeds); each residual run
# reads the base's frozen conditioning (state + camera features) and evaluates the BC start at step 0.
# Usage: run.sh SEED [SEED...]   (one seed after another; run two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/push_px ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse-pixels policy=expert noise=0.3 \
  episodes=50 env.pixel_size=[48,48] out=data/push_px seed=0
mkdir -p runs/pixel_bc runs/pixel_finetune
BC="dataset=data/push_px policy=flow steps=5000 batch_size=64 log_every=500 encoder_channels=16 encoder_layers=3
  encoder_feature_dim=32 image_shift=3 threads=1 env.spec=arm:push-sparse-pixels eval_episodes=50"
for seed in "$@"; do
  [ -f runs/pixel_bc/flow_px_s$seed/policy/config.json ] || .venv/bin/robot-rl bc $BC seed=$seed \
    run_dir=runs/pixel_bc/flow_px_s$seed > runs/pixel_bc/flow_px_s$seed.log 2>&1
  .venv/bin/robot-rl finetune experiment=residual_push_pixels \
    base_policy=runs/pixel_bc/flow_px_s$seed/policy threads=1 \
    quiet=true seed=$seed run_dir=runs/pixel_finetune/residual_s$seed > runs/pixel_finetune/residual_s$seed.log 2>&1
done
