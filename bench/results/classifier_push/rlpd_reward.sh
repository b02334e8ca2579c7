#!/bin/bash
# RLPD on arm:push-sparse with the reward classifier's reward instead of the task's: experiment=rlpd_push (20 expert
# demos, the state learner, both mirrors, 2 critic steps per env step) with env.reward_classifier=<classifier>. The
# state task has no cameras, so its training envs render the classifier's front camera at its 64x64 beside the full
# state (robot_rl.classifier_reward.classifier_view); the learner reads the state only, so this measures the
# classifier as a reward apart from learning from pixels. Evaluation keeps the task's own success. The demos keep the
# rewards they were recorded with (the task's). The comparison is bench/results/push_rlpd's group
# rlpd_sac_mirror_online_utd2 (the same preset on the true reward: 90, 90, 90% at 20k).
# The classifier (the sweep's `long` setting: front camera, 5,000 steps, batches of 32, seed 0, trained on episodes
# 0-19 of collect_push_frames.py's data/clf/push64, precision/recall 83.2/89.2% on episodes 20-69):
#   python bench/results/classifier_push/sweep.py data/clf/push64 runs/clf/rerun.json \
#     long=batch_size:32,steps:5000,cameras:front --seeds 0 --save runs/clf
# Usage: rlpd_reward.sh SEED [SEED...] [-- KEY=VALUE...]; runs in runs/clf_rlpd/s<seed> (CLF= another classifier,
# OUT= another folder); each run then evaluated on 50 held-out episodes (seeds 1000-1049); rlpd_reward.py summarises.
# Episodes that go on past the task's success (rlpd_reward.py's last two groups):
#   CLF=runs/clf/mined2_s0 OUT=runs/clf_rlpd_r3_noend rlpd_reward.sh 0 1 2 -- env.end_on_task_success=false
#   CLF=runs/clf/mined2_s0 OUT=runs/clf_rlpd_r3_noend_k2 rlpd_reward.sh 0 1 2 -- env.end_on_task_success=false \
#     env.reward_classifier_consecutive=2
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
CLF=${CLF:-runs/clf/long_s0}; OUT=${OUT:-runs/clf_rlpd}
[ -d "$CLF" ] || { echo "train the classifier first (this script's header)" >&2; exit 2; }
[ -d data/push_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 \
  out=data/push_demos seed=0
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
mkdir -p $OUT
for seed in "${seeds[@]}"; do
  run=$OUT/s$seed
  [ -f $run/metrics.csv ] && grep -q "^20000," $run/metrics.csv || \
    .venv/bin/robot-rl train experiment=rlpd_push env.reward_classifier=$CLF threads=1 quiet=true seed=$seed \
      run_dir=$run "$@" > $run.log 2>&1
  [ -f $run/heldout.log ] || .venv/bin/robot-rl eval run=$run checkpoint=latest episodes=50 seed=1000 video=false \
    > $run/heldout.log 2>&1
done
