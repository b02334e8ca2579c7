#!/bin/bash
# hil-train on the simulated arm's reach (20 Hz, scripted operator, 2,000 steps, seed 0) with the learner in
# process and on Ray, one after the other against the same served robot; each run's hil_metrics.csv has the
# robot's ticks its loop missed. Usage: run_ab.sh [MODE...] (local, distributed; default both); runs in
# runs/ticks_ab/<mode>.
set -euo pipefail
cd "$(dirname "$0")/../../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl ROBOT_RL_TOKEN=${ROBOT_RL_TOKEN:-abtoken}
OUT=${OUT:-runs/ticks_ab}; mkdir -p $OUT
modes=("$@"); [ ${#modes[@]} -gt 0 ] || modes=(local distributed)
.venv/bin/robot-rl serve-robot driver=sim_arm task=reach control_hz=20 port=${PORT:-50290} seed=0 status_every=0 \
  > $OUT/serve.log 2>&1 &
server=$!; trap "kill $server 2>/dev/null || true" EXIT; sleep 8
for mode in "${modes[@]}"; do
  extra=(); [ "$mode" = distributed ] && extra=(distributed=true)
  .venv/bin/robot-rl hil-train robot=127.0.0.1:${PORT:-50290} teleop=scripted steps=2000 seed=0 step_timeout_s=5 \
    run_dir=$OUT/$mode "${extra[@]}" > $OUT/$mode.log 2>&1
done
