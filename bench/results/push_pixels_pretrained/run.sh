#!/bin/bash
# RLPD from cameras on arm:push-sparse-pixels through a frozen ResNet-10 pretrained in simulation
# (experiment=rlpd_push_pixels_pretrained: 20 expert demos at 48x48, both mirrors, 2 critic steps per env step,
# batches of 256, 20k env steps = agent steps, action repeat 1, 1 env; evaluation every 2k env steps on 20
# deterministic episodes). Usage: [GROUP=name] run.sh SEED [SEED...] [-- train keys...]: one run after another (two
# invocations side by side on 2 cores), into runs/push_pixels_pretrained/<GROUP>_s<SEED> (GROUP default rlpd); a
# stopped run goes on from its checkpoint when run again. The backbone (data/backbone/resnet10_push48.pt) is made
# first when missing; the rest is ../push_pixels/run.sh. Then per run the final weights on 50 held-out episodes:
#   robot-rl eval run=<run> checkpoint=latest episodes=50 seed=1000 video=false > <run>/heldout.log
# and python summarize.py. The readout runs (agent.encoder_readout: the backbone's pretraining heads as frozen
# features): GROUP=readout EXPERIMENT=rlpd_push_pixels_readout run.sh SEED, then python summarize.py readout.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cd "$here/../../.."
[ -f data/backbone/resnet10_push48.pt ] || MUJOCO_GL=egl .venv/bin/python "$here/pretrain_backbone.py" data/backbone \
  --threads 2
EXPERIMENT=${EXPERIMENT:-rlpd_push_pixels_pretrained} OUT=runs/push_pixels_pretrained STEPS=20000 \
  exec "$here/../push_pixels/run.sh" "$@"
