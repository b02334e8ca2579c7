#!/bin/bash
# One-step distillation (robot-rl distill, issue 59) of flow and diffusion BC policies on state-based
# arm:push-sparse: each seed trains its own teacher (10 sampling steps) on the same 50 noisy-expert demos as
# residual_push, distils it on those demos' observations, and evaluates teacher and student on the same 200
# episodes (deterministic: zero noise), timing both per chunk at batch 1 with one thread.
# Usage: run.sh SEED [SEED...]   (one seed after another; run two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/ft_push_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert noise=0.3 \
  episodes=50 seed=100 out=data/ft_push_demos
mkdir -p runs/distill_push
for seed in "$@"; do
  for policy in flow diffusion; do
    [ -f runs/distill_push/bc_${policy}_s$seed/policy/config.json ] || .venv/bin/robot-rl bc \
      dataset=data/ft_push_demos policy=$policy num_inference_steps=10 steps=3000 threads=1 seed=$seed quiet=true \
      run_dir=runs/distill_push/bc_${policy}_s$seed > runs/distill_push/bc_${policy}_s$seed.log 2>&1
    [ -f runs/distill_push/student_${policy}_s$seed/distill_summary.json ] || .venv/bin/robot-rl distill \
      teacher=runs/distill_push/bc_${policy}_s$seed/policy dataset=data/ft_push_demos steps=3000 threads=1 \
      seed=$seed env.spec=arm:push-sparse eval_episodes=200 latency_repeats=300 \
      run_dir=runs/distill_push/student_${policy}_s$seed > runs/distill_push/student_${policy}_s$seed.log 2>&1
  done
done
