#!/bin/bash
# run.sh's flow students again with dagger_episodes=50: after half the steps, the observations of 50 of the
# student's own episodes (starts apart from the evaluation's) join the demos' for the teacher to label.
# Usage: run_dagger.sh SEED [SEED...]   (after run.sh SEED: it reuses that seed's flow teacher)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
for seed in "$@"; do
  run=runs/distill_push/student_flow_dagger_s$seed
  [ -f $run/distill_summary.json ] || .venv/bin/robot-rl distill teacher=runs/distill_push/bc_flow_s$seed/policy \
    dataset=data/ft_push_demos steps=3000 threads=1 seed=$seed env.spec=arm:push-sparse eval_episodes=200 \
    latency_repeats=300 dagger_episodes=50 run_dir=$run > $run.log 2>&1
done
