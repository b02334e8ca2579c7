#!/bin/bash
# WSRL against naive fine-tuning and RLPD on arm:reach (dense reward) from data/reach_mixed (50 expert, 50
# noisy-expert and 50 random episodes: the collect commands are in configs/experiment/wsrl_reach.yaml), or with
# TASK=push on arm:push (dense) from data/push_mixed (20 expert, 20 noisy-expert, 10 random: wsrl_push.yaml), runs
# then in runs/wsrl_push and summarised by `TASK=push summarize.py` into ../wsrl_push, or with TASK=push-sparse on
# arm:push-sparse from data/push_sparse_mixed (the same episodes' kinds: wsrl_push_sparse.yaml, which adds
# rlpd_push's gamma 0.95, two critic steps per env step and mirrored online data; its rlpd is rlpd_push as it is). One
# pretraining per seed, shared by WSRL and naive: IQL (expectile 0.9) with running observation normalisation, 20k
# offline steps (Cal-QL, the preset's, gave at most 15% on reach: bench/results/wsrl_reach_offline). Then 20k online
# env steps (= agent steps, action repeat 1, 1 env) evaluated every 1k env steps (push: 2k) on 20 deterministic
# episodes (step 0 is the pretrained policy): wsrl = 5k warm-up steps of the pretrained policy without updates, then
# online SAC on online data only; naive = the same with updates from the first step (train.learning_starts=0);
# rlpd = no pretraining, half of every batch from the dataset (the README's command).
# Usage: [TASK=reach|push] [KINDS="wsrl naive rlpd"] [TAG=name] run.sh SEED [SEED...] [-- KEY=VALUE...]
#   (runs go to runs/wsrl[_push]/online_KIND[_TAG]_sSEED)
# Since 2026-11-27 experiment=wsrl_reach sets train.critic_warmup_updates=2000, so `wsrl` is now the group measured
# as wsrl_cw2k; the `wsrl` and `wsrl_frozen` groups ran before: repeat them with -- train.critic_warmup_updates=0.
# Since 2026-12-01 experiment=wsrl_reach also freezes the statistics and starts the temperature at 0.001 (its
# pretraining was already IQL's here), so `wsrl` on reach is the group measured as wsrl_frozen_cw2k_t001
# (../wsrl_reach_temperature); the groups before it repeat with -- offline.freeze_statistics=false
# agent.init_temperature=0.05 added to their own keys.
# e.g. TAG=frozen run.sh 0 1 2 -- offline.freeze_statistics=true;
#      KINDS=wsrl TAG=frozen_cw2k run.sh 0 1 2 -- offline.freeze_statistics=true train.critic_warmup_updates=2000
set -euo pipefail
cd "$(dirname "$0")/../../.."
export OMP_NUM_THREADS=1 MUJOCO_GL=egl
TASK=${TASK:-reach}
case $TASK in
  reach) runs=runs/wsrl; eval_every=1000; preset=wsrl_reach; data=data/reach_mixed ;;
  push) runs=runs/wsrl_push; eval_every=2000; preset=wsrl_push; data=data/push_mixed ;;
  push-sparse) runs=runs/wsrl_push_sparse; eval_every=2000; preset=wsrl_push_sparse; data=data/push_sparse_mixed ;;
  *) echo "TASK must be reach, push or push-sparse, got $TASK" >&2; exit 2 ;;
esac
[ -d $data ] || { echo "record $data first (configs/experiment/$preset.yaml)" >&2; exit 2; }
seeds=(); while [ $# -gt 0 ] && [ "$1" != "--" ]; do seeds+=("$1"); shift; done; [ $# -gt 0 ] && shift
common=(threads=1 quiet=true agent.obs_norm=true train.eval_every=$eval_every)
iql=(experiment=$preset offline.algorithm=iql offline.iql.expectile=0.9)
mkdir -p $runs
for seed in "${seeds[@]}"; do
  pre=$runs/iql20k_norm_s$seed
  for kind in ${KINDS:-wsrl naive rlpd}; do
    run=$runs/online_${kind}${TAG:+_$TAG}_s$seed
    [ -f $run/metrics.csv ] && grep -q "^20000," $run/metrics.csv && continue
    case $kind in
      rlpd) if [ $TASK = push-sparse ]; then recipe=(); else  # push-sparse: the rlpd_push preset as it is
              recipe=(agent.gamma=0.99 agent.utd=1 data.mirror=false train.mirror_online=false); fi
            .venv/bin/robot-rl train experiment=rlpd_push env.spec=arm:$TASK data.path=$data \
              train.learning_starts=500 "${recipe[@]}" \
              train.eval_every=$eval_every threads=1 quiet=true seed=$seed run_dir=$run "$@" > $run.log 2>&1 ;;
      wsrl|naive)
        [ -f $pre/checkpoints/pretrained.pt ] || .venv/bin/robot-rl finetune "${iql[@]}" "${common[@]}" seed=$seed \
          train.steps=1 offline.steps=20000 offline.eval_every=2000 run_dir=$pre > $pre.log 2>&1
        extra=(); [ $kind = naive ] && extra=(train.learning_starts=0 train.critic_warmup_updates=0)
        .venv/bin/robot-rl finetune "${iql[@]}" "${common[@]}" seed=$seed offline.steps=0 \
          offline.init=$pre/checkpoints/pretrained.pt run_dir=$run "${extra[@]}" "$@" > $run.log 2>&1 ;;
    esac
  done
done
