#!/bin/bash
# Autonomous practice against a reset every episode, sparse push, RLPD from 20 expert demos (experiment=rlpd_push,
# 20k env steps = 16.7 robot minutes at 20 Hz, seeds 0-2; issue 59's practice row). Modes:
#   practice       env.practice=true (practice_reset=expert), in the practice scene (ramps and fences keep the cube
#                  within reach): a scripted reset controller pushes (or, where a push cannot reach it, picks up
#                  and carries) the cube to a fresh start between episodes (its control steps: metrics.csv
#                  reset_steps), the arm goes home
#   practice_home  env.practice=true env.practice_reset=home: the cube stays where the last episode left it
#   reset          a person's reset every episode
# Practice runs count the human resets (metrics.csv human_resets, train_episodes). Each run's final checkpoint then gets 100 deterministic evaluation
# episodes from the task's own starts (eval_latest.txt). Then summarize.py -> summary.json.
# Usage: run.sh practice|practice_home|reset SEED [SEED...]   (one seed after another; two invocations side by side for two cores)
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
  case $mode in
    practice) args="experiment=rlpd_push env.practice=true env.practice_reset=expert" ;;
    practice_home) args="experiment=rlpd_push env.practice=true env.practice_reset=home" ;;
    reset) args="experiment=rlpd_push env.practice=false" ;;
    *) echo "mode must be practice, practice_home or reset, got $mode" >&2; exit 2 ;;
  esac
  if [ -f $run/checkpoints/latest.pt ]; then args="resume=$run"; fi
  .venv/bin/robot-rl train $args seed=$seed threads=1 quiet=true train.video=false run_dir=$run > $run.log 2>&1
  .venv/bin/robot-rl eval run=$run checkpoint=latest episodes=100 video=false > $run/eval_latest.txt 2>&1
done
