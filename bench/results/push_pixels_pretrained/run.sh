#!/bin/bash
# RLPD from cameras on arm:push-sparse-pixels through a frozen ResNet-10 pretrained in simulation
# (experiment=rlpd_push_pixels_pretrained: 20 expert demos at 48x48, both mirrors, 2 critic steps per env step,
# batches of 256, 20k env steps = agent steps, action repeat 1, 1 env; evaluation every 2k env steps on 20
# deterministic episodes). Usage: [GROUP=name] run.sh SEED [SEED...] [-- train keys...]: one run after another (two
# invocations side by side on 2 cores), into runs/push_pixels_pretrained/<GROUP>_s<SEED> (GROUP default rlpd); a
# stopped run goes on from its checkpoint when run again. The backbone (data/backbone/resnet10_push48.pt) and the
# demos are made first when missing.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
GROUP=${GROUP:-rlpd}
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
[ -f data/backbone/resnet10_push48.pt ] || .venv/bin/python bench/results/push_pixels_pretrained/pretrain_backbone.py \
  data/backbone --threads 2
[ -d data/push_pixel_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse-pixels policy=expert \
  episodes=20 env.pixel_size=[48,48] out=data/push_pixel_demos seed=0
mkdir -p runs/push_pixels_pretrained
for seed in "${seeds[@]}"; do
  run=runs/push_pixels_pretrained/${GROUP}_s$seed
  if grep -q "^20000," "$run/metrics.csv" 2>/dev/null; then continue; fi
  if [ -f "$run/checkpoints/latest.pt" ]; then
    .venv/bin/robot-rl train resume=$run quiet=true >> $run.log 2>&1
  else
    .venv/bin/robot-rl train experiment=rlpd_push_pixels_pretrained threads=1 quiet=true seed=$seed run_dir=$run "$@" \
      > $run.log 2>&1
  fi
done
