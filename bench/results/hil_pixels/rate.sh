#!/bin/bash
# How many learner updates each robot second gets in hil-train from cameras: the served sim arm (push-sparse,
# 20 Hz, front + wrist cameras at SIZE x SIZE) in its own process, the simulated person as the operator, the
# learner in the actor's process (NAME=local) or in a Ray process beside it (NAME=distributed, pass
# distributed=true). No demos: the first updates come after learning_starts transitions.
# Usage: NAME=<name> rate.sh [hil-train keys...]; then summarize_rate.py runs/hil_pixel_rate
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
export ROBOT_RL_TOKEN=${ROBOT_RL_TOKEN:-$(.venv/bin/python -c "import secrets; print(secrets.token_hex(16))")}
STEPS=${STEPS:-2400}; SIZE=${SIZE:-64}; OUT=${OUT:-runs/hil_pixel_rate}; PORT=${PORT:-50170}; NAME=${NAME:-local}
mkdir -p $OUT
.venv/bin/robot-rl serve-robot driver=sim_arm task=push reward=sparse control_hz=20 pixels=true \
  "pixel_size=[$SIZE,$SIZE]" port=$PORT status_every=0 > $OUT/serve_$NAME.log 2>&1 &
server=$!
trap "kill $server 2>/dev/null || true" EXIT
sleep 8
.venv/bin/robot-rl hil-train robot=127.0.0.1:$PORT teleop=person pixels=true steps=$STEPS step_timeout_s=5 \
  record=false log_every=300 run_dir=$OUT/$NAME "$@" > $OUT/$NAME.log 2>&1
