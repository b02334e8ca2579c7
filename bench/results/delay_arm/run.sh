#!/usr/bin/env bash
# Naive against delay-aware learning under a 5-step (250 ms at 20 Hz) observation-to-action delay, with the no-delay
# run for reference, on the dynamic arm task (arm:track: a target circling at 15 cm/s) and a static one (arm:reach):
# the default agent, STEPS env steps (= agent steps, no action repeat), seeds 0-2, threads=1, two runs at a time.
# Each run is then evaluated on 100 deterministic episodes of its final (latest) checkpoint under the delay it was
# trained with (robot-rl eval run=...), written to eval_latest.txt beside it; the no-delay runs' policies also under the
# 5-step delay (eval_under_delay.py -> eval_under_delay.txt). Then summarize.py -> summary.json.
# The drawn variant (not in the default VARIANTS): delay-aware under a delay drawn per episode from 3-7 steps
# (env_delay.sample_steps, the drawn delay in the state), trained and evaluated under that draw.
#   OUT=/tmp/delayarm STEPS=6000 [VARIANTS="nodelay naive aware drawn"] [PARALLEL=2] bash bench/results/delay_arm/run.sh [task ...]
set -euo pipefail
OUT=${OUT:-/tmp/delayarm}
STEPS=${STEPS:-6000}
TASKS=${*:-track reach}
jobs=()
for task in $TASKS; do
  for seed in 0 1 2; do
    for variant in ${VARIANTS:-nodelay naive aware}; do
      case $variant in
        nodelay) delay="";;
        naive) delay="env_delay.steps=5 env_delay.aware=false";;
        aware) delay="env_delay.steps=5 env_delay.aware=true";;
        drawn) delay="env_delay.sample_steps=[3,4,5,6,7] env_delay.aware=true";;
      esac
      dir=$OUT/$task/$variant/seed_$seed
      [ -f "$dir/eval_latest.txt" ] && continue
      train="env.spec=arm:$task seed=$seed threads=1 train.video=false quiet=true $delay run_dir=$dir"
      [ -f "$dir/checkpoints/latest.pt" ] && train="resume=$dir"  # a stopped or shorter run goes on to STEPS
      under=""  # the no-delay policy also deployed under the delay, as a policy trained without it would be
      [ $variant = nodelay ] && under=" && python $(dirname "$0")/eval_under_delay.py $dir 5 > $dir/eval_under_delay.txt 2>&1"
      jobs+=("robot-rl train $train train.steps=$STEPS >> $dir.log 2>&1 && robot-rl eval run=$dir checkpoint=latest episodes=100 video=false > $dir/eval_latest.txt 2>&1$under")
    done
  done
done
mkdir -p "$OUT"
for task in $TASKS; do mkdir -p "$OUT/$task"/{nodelay,naive,aware,drawn}; done
[ ${#jobs[@]} -eq 0 ] || printf '%s\0' "${jobs[@]}" | xargs -0 -P "${PARALLEL:-2}" -I{} bash -c '{}'
python "$(dirname "$0")/summarize.py" "$OUT"
