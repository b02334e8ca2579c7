#!/bin/bash
# JSRL with a weak guide against RLPD from the same data, sparse push (issue 59's JSRL row, on push-sparse at 20k
# env steps instead of pick_place-sparse at 50k: what two cores afford in a session). The data: the 50 noisy-expert
# demos of residual_push and distill_push (data/ft_push_demos). The guide: the flow BC policy that distill_push's
# run.sh trains on them for the same seed (10 Euler steps, ~50% success), driving each training episode's first
# steps (experiment=sac_push: the same SAC, no prior data). RLPD: experiment=rlpd_push on the same demos.
# Usage: run.sh jsrl|rlpd SEED [SEED...]   (one seed after another; two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
method=$1; shift
mkdir -p runs/jsrl_push
for seed in "$@"; do
  run=runs/jsrl_push/${method}_s$seed
  [ -f $run/metrics.csv ] && tail -1 $run/metrics.csv | grep -q "^20000," && continue  # finished
  if [ "$method" = jsrl ]; then
    guide=runs/distill_push/bc_flow_s$seed/policy
    [ -f $guide/config.json ] || { echo "no guide $guide: run bench/results/distill_push/run.sh $seed first"; exit 2; }
    args="experiment=sac_push jsrl.guide=$guide"
  else
    args="experiment=rlpd_push data.path=data/ft_push_demos"
  fi
  if [ -f $run/checkpoints/latest.pt ]; then args="resume=$run"; fi
  .venv/bin/robot-rl train $args seed=$seed threads=1 quiet=true run_dir=$run > $run.log 2>&1
done
