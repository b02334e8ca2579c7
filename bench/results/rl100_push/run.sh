#!/bin/bash
# RL-100's gated offline rounds (robot-rl finetune method=rl100, issue 59 item 1) on state-based arm:push-sparse. The
# starting point of each seed is the flow BC policy that bench/results/distill_push/run.sh trains for that seed (10
# Euler steps, 3,000 steps on the 50 noisy-expert demos data/ft_push_demos, about 59% success); the demos are the
# first rows of the rounds' dataset (data=). 3 rounds of 20 episodes each (at most 6,000 env steps plus the cut-off
# episodes), the default critic, candidate and gate settings. The gate decides from the data; success on 50 fixed
# evaluation starts is measured for the log only (rl100_rounds.json).
# Usage: run.sh SEED [SEED...]   (one seed after another; two invocations side by side for two cores)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
mkdir -p runs/rl100_push
for seed in "$@"; do
  base=runs/distill_push/bc_flow_s$seed/policy
  [ -f $base/config.json ] || { echo "no BC policy $base: run bench/results/distill_push/run.sh $seed first"; exit 2; }
  run=runs/rl100_push/rl100_s$seed
  python3 -c "import json,sys; sys.exit(json.load(open('$run/rl100_rounds.json'))['rounds_done'] < 3)" 2>/dev/null \
    && continue  # finished
  args="method=rl100 base_policy=$base data=data/ft_push_demos env.spec=arm:push-sparse env.num_envs=10 \
env.num_eval_envs=50 rl100.rounds=3 rl100.episodes_per_round=20 seed=$seed"
  if [ -f $run/checkpoints/latest.pt ]; then args="resume=$run"; fi
  .venv/bin/robot-rl finetune $args threads=1 run_dir=$run > $run.log 2>&1
done
