#!/bin/bash
# WSRL against naive fine-tuning on arm:reach (dense reward) from data/reach_mixed (50 expert, 50 noisy-expert and
# 50 random episodes: the collect commands are in configs/experiment/wsrl_reach.yaml), one pretraining per seed
# shared by both: IQL (expectile 0.9) with running observation normalisation, 20k offline steps (Cal-QL, the
# preset's, gave at most 15%: bench/results/wsrl_reach_offline). Then 20k online env steps (= agent steps, action
# repeat 1, 1 env) from the pretrained agent, evaluated every 1k env steps on 20 deterministic episodes (step 0 is
# the pretrained policy): WSRL = 5k warm-up steps of the pretrained policy without updates, then online SAC on
# online data only; naive = the same with updates from the first step (train.learning_starts=0).
# Usage: run.sh SEED [SEED...]   (one seed after another; two invocations side by side)
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
[ -d data/reach_mixed ] || { echo "record data/reach_mixed first (configs/experiment/wsrl_reach.yaml)" >&2; exit 2; }
common=(experiment=wsrl_reach threads=1 quiet=true offline.algorithm=iql offline.iql.expectile=0.9 agent.obs_norm=true)
for seed in "$@"; do
  pre=runs/wsrl/iql20k_norm_s$seed
  [ -f $pre/checkpoints/pretrained.pt ] || .venv/bin/robot-rl finetune "${common[@]}" seed=$seed train.steps=1 \
    offline.steps=20000 offline.eval_every=2000 run_dir=$pre > $pre.log 2>&1
  for kind in wsrl naive; do
    run=runs/wsrl/online_${kind}_s$seed
    extra=(); [ $kind = naive ] && extra=(train.learning_starts=0)
    [ -f $run/metrics.csv ] && grep -q "^20000," $run/metrics.csv && continue
    .venv/bin/robot-rl finetune "${common[@]}" seed=$seed offline.steps=0 \
      offline.init=$pre/checkpoints/pretrained.pt run_dir=$run "${extra[@]}" > $run.log 2>&1
  done
done
