#!/bin/bash
# Residual RL (ResFiT) on flow BC policies, state-based arm:push-sparse (issue 14, build item 4), the preset
# configs/finetune/residual_push.yaml. Each seed trains its own flow BC start on the same 50 noisy-expert demos
# (the preset's header), then a residual run with the same seed; each run evaluates the BC start at step 0.
# Usage: run.sh SEED [SEED...]   (one seed after another; run two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/ft_push_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert noise=0.3 \
  episodes=50 seed=100 out=data/ft_push_demos
mkdir -p runs/residual_push
for seed in "$@"; do
  [ -f runs/residual_push/bc_flow_s$seed/policy/config.json ] || .venv/bin/robot-rl bc dataset=data/ft_push_demos \
    policy=flow num_inference_steps=4 env.spec=arm:push-sparse eval_episodes=50 threads=1 seed=$seed \
    run_dir=runs/residual_push/bc_flow_s$seed > runs/residual_push/bc_flow_s$seed.log 2>&1
  .venv/bin/robot-rl finetune experiment=residual_push base_policy=runs/residual_push/bc_flow_s$seed/policy \
    threads=1 quiet=true seed=$seed run_dir=runs/residual_push/residual_s$seed \
    > runs/residual_push/residual_s$seed.log 2>&1
done
