#!/bin/bash
# Autonomous practice against a reset every episode, sparse push, RLPD from 20 expert demos (experiment=rlpd_push,
# 20k env steps = 16.7 robot minutes at 20 Hz, seeds 0-2; issue 59's practice row): env.practice=true leaves the scene
# as the last episode left it and counts the human resets (metrics.csv human_resets, train_episodes); the reset run
# needs a person for every one of its episodes. Each run's final checkpoint then gets 100 deterministic evaluation
# episodes from the task's own starts (eval_latest.txt). Then summarize.py -> summary.json.
# Usage: run.sh practice|reset SEED [SEED...]   (one seed after another; two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
mode=$1; shift
[ -f data/push_demos/meta/info.json ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 \
  out=data/push_demos seed=0 > /dev/null
mkdir -p runs/practice_push
for seed in "$@"; do
  run=runs/practice_push/${mode}_s$seed
  [ -f $run/eval_latest.txt ] && continue  # finished
  args="experiment=rlpd_push env.practice=$([ "$mode" = practice ] && echo true || echo false)"
  if [ -f $run/checkpoints/latest.pt ]; then args="resume=$run"; fi
  .venv/bin/robot-rl train $args seed=$seed threads=1 quiet=true train.video=false run_dir=$run > $run.log 2>&1
  .venv/bin/robot-rl eval run=$run checkpoint=latest episodes=100 video=false > $run/eval_latest.txt 2>&1
done
