#!/bin/bash
# hil-train on the simulated arm's sparse push over the bridge, with the scripted operator (it takes over when the
# policy stops making progress) and 20 scripted demos recorded over the bridge first; then deploy of the run's
# best weights (autonomous, no operator) on 50 episodes. One served robot per seed, each on its own port.
# Usage: run.sh SEED [SEED...] [-- hil-train keys...]   e.g. run.sh 0 1 2 -- agent.utd=2
# Groups (OUT=runs/<group>, summarised by summarize.py runs/<group> <folder>): gamma0.95 = -- agent.gamma=0.95;
# mirror = -- agent.gamma=0.95 mirror_demos=true mirror_online=true; mirror_penalty = the same and
# intervention_penalty=1. Two invocations side by side need different seeds or PORT_BASE (default 50070).
# DEMOS=<dataset> uses that dataset (e.g. robot-rl collect's simulator demos) instead of recording demos over the bridge.
# mirror_proposed = OUT=runs/hil_prop_op PORT_BASE=50470 run.sh 0 1 2 -- agent.gamma=0.95 mirror_demos=true
# mirror_online=true distributed=true; mirror_proposed_utd2 = the same and agent.utd=2, OUT=runs/hil_utd2 with
# runs/hil_utd2/demos_s<seed> linked to runs/hil_prop_op's (the same demos); mirror_proposed_upt3 = the same with
# updates_per_transition=3 instead, OUT=runs/hil_upt3 (seed 0 only); mirror_proposed_takeover5 = mirror_proposed's keys
# and teleop_args.takeover_steps=5, OUT=runs/hil_to5_prop PORT_BASE=50670 with runs/hil_prop_op's demos (seed 0 only).
# One run at a time: two side by side made
# 7-10% of the robot's ticks go missed (a loaded host), against under 0.1% alone.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
export ROBOT_RL_TOKEN=${ROBOT_RL_TOKEN:-$(.venv/bin/python -c "import secrets; print(secrets.token_hex(16))")}
STEPS=${STEPS:-12000}; OUT=${OUT:-runs/hil_push}; HZ=${HZ:-20}
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
mkdir -p $OUT
for seed in "${seeds[@]}"; do
  port=$((${PORT_BASE:-50070} + seed))
  .venv/bin/robot-rl serve-robot driver=sim_arm task=push reward=sparse control_hz=$HZ port=$port seed=$seed \
    status_every=0 > $OUT/serve_s$seed.log 2>&1 &
  server=$!
  trap "kill $server 2>/dev/null || true" EXIT
  sleep 8
  robot=127.0.0.1:$port
  demos=${DEMOS:-$OUT/demos_s$seed}
  [ -d $demos ] || .venv/bin/robot-rl teleop robot=$robot teleop=scripted episodes=20 seed=$((1000 + seed)) \
    out=$OUT/demos_s$seed > $OUT/demos_s$seed.log 2>&1
  .venv/bin/robot-rl hil-train robot=$robot teleop=scripted steps=$STEPS seed=$seed demos=$demos \
    step_timeout_s=5 run_dir=$OUT/s$seed "$@" > $OUT/s$seed.log 2>&1
  .venv/bin/robot-rl deploy robot=$robot checkpoint=$OUT/s$seed episodes=50 step_timeout_s=5 \
    > $OUT/deploy_s$seed.log 2>&1
  kill $server; wait $server 2>/dev/null || true
done
