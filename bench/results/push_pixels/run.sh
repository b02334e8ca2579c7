#!/bin/bash
# RLPD from cameras on arm:push-sparse-pixels with 20 expert demos recorded at 48x48 (experiment=rlpd_push_pixels:
# 40k env steps = agent steps, action repeat 1, 1 env; evaluation every 2k env steps on 20 deterministic episodes).
# Usage: [GROUP=name] run.sh SEED [SEED...] [-- train keys...]   (one run after another; two invocations side by
# side on 2 cores). Runs go to runs/push_pixels/<GROUP>_s<SEED> (GROUP default rlpd: the preset as it is). A run
# that was stopped (its checkpoints/latest.pt is written every 4k steps) goes on from its checkpoint when run again.
# Groups: rlpd (seeds 0-2, scene of before 2026-11-27, demos data/push_pixel_demos_scene1); mirror = GROUP=mirror
# run.sh 0 1 2 -- data.mirror=true train.mirror_online=true train.replay_capacity=82000 (the symmetric scene, demos
# recorded again; the reflections fill half of the replay, so twice the capacity keeps every step).
# EXPERIMENT, OUT and STEPS (default rlpd_push_pixels, runs/push_pixels, 40000) run another preset the same way
# (../push_pixels_pretrained/run.sh does).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
GROUP=${GROUP:-rlpd}; EXPERIMENT=${EXPERIMENT:-rlpd_push_pixels}; OUT=${OUT:-runs/push_pixels}; STEPS=${STEPS:-40000}
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
[ -d data/push_pixel_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse-pixels policy=expert \
  episodes=20 env.pixel_size=[48,48] out=data/push_pixel_demos seed=0
mkdir -p $OUT
for seed in "${seeds[@]}"; do
  run=$OUT/${GROUP}_s$seed
  if grep -q "^$STEPS," "$run/metrics.csv" 2>/dev/null; then continue; fi
  if [ -f "$run/checkpoints/latest.pt" ]; then
    .venv/bin/robot-rl train resume=$run quiet=true >> $run.log 2>&1
  else
    .venv/bin/robot-rl train experiment=$EXPERIMENT threads=1 quiet=true seed=$seed run_dir=$run "$@" \
      > $run.log 2>&1
  fi
done
