#!/bin/bash
# BC flow from 50 noisy pixel demos (arm:push-sparse-pixels, two 48x48 cameras), 3 seeds, plus a
# proprioception-only control (cameras=[]). Run from anywhere; writes data/push_px and runs/pixel_bc/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/push_px ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse-pixels policy=expert noise=0.3 \
  episodes=50 env.pixel_size=[48,48] out=data/push_px seed=0
mkdir -p runs/pixel_bc
COMMON="dataset=data/push_px policy=flow steps=5000 batch_size=64 log_every=500 encoder_channels=16 encoder_layers=3
  encoder_feature_dim=32 image_shift=3 threads=1 env.spec=arm:push-sparse-pixels eval_episodes=50"
for seed in 0 1 2; do
  .venv/bin/robot-rl bc $COMMON seed=$seed run_dir=runs/pixel_bc/flow_px_s$seed > runs/pixel_bc/flow_px_s$seed.log 2>&1
done
.venv/bin/robot-rl bc $COMMON cameras=[] seed=0 run_dir=runs/pixel_bc/flow_state_s0 > runs/pixel_bc/flow_state_s0.log 2>&1
