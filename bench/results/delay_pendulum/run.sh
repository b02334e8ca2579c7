#!/usr/bin/env bash
# Naive against delay-aware learning under a 3-step (150 ms at 20 Hz) observation-to-action delay, with the no-delay
# run for reference: gym:Pendulum-v1, the default agent, 6k env steps, seeds 0-2, threads=1 (a 2-core machine shared
# with other work: the three variants ran at once beside other jobs). Then summarize.py -> summary.json.
set -euo pipefail
OUT=${OUT:-/tmp/delaycmp}
common="env.spec=gym:Pendulum-v1 train.steps=6000 seed=0-2 jobs=1 threads=1 train.video=false quiet=true"
robot-rl train $common env_delay.steps=3 env_delay.aware=false run_dir=$OUT/naive &
robot-rl train $common env_delay.steps=3 env_delay.aware=true run_dir=$OUT/aware &
robot-rl train $common run_dir=$OUT/nodelay &
wait
python bench/results/delay_pendulum/summarize.py $OUT
