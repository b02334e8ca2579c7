#!/bin/bash
# hil-train from cameras as a robot user runs it, on the served sim arm's sparse push (20 Hz, front + wrist at
# 48x48, proprioception: the scene's state goes only to the simulated person): 20 demos by the simulated person
# over the bridge, then hil-train with the person taking over (learner on Ray beside the actor, the CPU-sized DrQ
# encoder of experiment=rlpd_push_pixels, the task's sparse reward), then deploy of the run's weights on 20
# episodes with no operator. One seed at a time (real time; two side by side miss ticks).
# Usage: run.sh SEED [SEED...] [-- hil-train keys...]; STEPS (default 8000 = 6.7 robot minutes), OUT, PORT_BASE.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
export ROBOT_RL_TOKEN=${ROBOT_RL_TOKEN:-$(.venv/bin/python -c "import secrets; print(secrets.token_hex(16))")}
STEPS=${STEPS:-8000}; OUT=${OUT:-runs/hil_pixels}; HZ=20
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
mkdir -p $OUT
for seed in "${seeds[@]}"; do
  port=$((${PORT_BASE:-50270} + seed))
  .venv/bin/robot-rl serve-robot driver=sim_arm task=push reward=sparse control_hz=$HZ port=$port seed=$seed \
    pixels=true "pixel_size=[48,48]" status_every=0 > $OUT/serve_s$seed.log 2>&1 &
  server=$!
  trap "kill $server 2>/dev/null || true" EXIT
  sleep 8
  robot=127.0.0.1:$port
  [ -d $OUT/demos_s$seed ] || .venv/bin/robot-rl teleop robot=$robot teleop=person episodes=20 seed=$((1000 + seed)) \
    teleop_args.seed=$((1000 + seed)) out=$OUT/demos_s$seed > $OUT/demos_s$seed.log 2>&1
  .venv/bin/robot-rl hil-train robot=$robot teleop=person teleop_args.seed=$seed steps=$STEPS seed=$seed \
    demos=$OUT/demos_s$seed pixels=true distributed=true learner_name=hil-pixels-s$seed step_timeout_s=5 \
    agent.encoder.channels=16 agent.encoder.layers=3 agent.encoder.feature_dim=32 agent.encoder.image_shift=3 \
    agent.optimiser.batch_size=64 agent.critic.gamma=0.95 run_dir=$OUT/s$seed "$@" > $OUT/s$seed.log 2>&1
  .venv/bin/robot-rl deploy robot=$robot checkpoint=$OUT/s$seed episodes=20 step_timeout_s=5 seed=$((5000 + seed)) \
    > $OUT/deploy_s$seed.log 2>&1
  kill $server; wait $server 2>/dev/null || true
done
