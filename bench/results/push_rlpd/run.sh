#!/bin/bash
# RLPD with 20 expert demos (experiment=rlpd_push) against SAC from scratch (experiment=sac_push) on
# arm:push-sparse, with the plain SAC agent (agent=sac, the presets' own) or the default agent (agent=simba), the
# presets' settings otherwise: 20k env steps (= agent steps, action repeat 1), evaluation every 2k env steps on 20
# deterministic episodes. The demos: 20 scripted expert episodes (seed 0).
# Usage: run.sh rlpd|sac sac|simba SEED [SEED...] [-- KEY=VALUE...]   (one run after another; two invocations side
# by side). Extra keys need TAG, which names their group: TAG=gamma0.99 run.sh rlpd sac 0 1 2 -- agent.gamma=0.99
# (the groups *_gamma0.99), TAG=40k run.sh rlpd sac 0 1 2 -- train.steps=40000 (the group rlpd_sac_40k, measured by
# continuing rlpd_sac's runs with robot-rl train resume=<run> train.steps=40000), TAG=utd2 ... -- agent.utd=2,
# TAG=mirror ... -- data.mirror=true, TAG=mirror_online ... -- data.mirror=true train.mirror_online=true,
# TAG=mirror_online_utd2 ... -- agent.utd=2 (the preset since 2026-11-27: both mirrors and agent.utd=2; and for
# sac_push, whose baseline group with 2 critic steps is TAG=utd2 run.sh sac sac 0 1 2 -- agent.utd=2).
# The groups ran with the preset of their day: those without "mirror" in their name before rlpd_push set data.mirror
# and train.mirror_online, those without "utd2" before it set agent.utd=2. To repeat one under another tag add what
# the preset changed since: -- data.mirror=false train.mirror_online=false agent.utd=1 (rlpd_sac), agent.utd=1
# (rlpd_sac_mirror_online, sac_sac).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/push_demos ] || .venv/bin/robot-rl collect env.spec=arm:push-sparse policy=expert episodes=20 \
  out=data/push_demos seed=0
kind=$1; agent=$2; shift 2
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
if [ $# -gt 0 ] && [ -z "${TAG:-}" ]; then echo "extra keys need TAG=<name> for their runs' group" >&2; exit 2; fi
mkdir -p runs/push_rlpd
for seed in "${seeds[@]}"; do
  name=${kind}_${agent}${TAG:+_$TAG}_s$seed
  [ -f runs/push_rlpd/$name/metrics.csv ] && continue
  .venv/bin/robot-rl train experiment=${kind}_push agent=$agent threads=1 quiet=true seed=$seed \
    run_dir=runs/push_rlpd/$name "$@" > runs/push_rlpd/$name.log 2>&1
done
