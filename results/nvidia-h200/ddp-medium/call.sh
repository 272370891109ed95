#!/usr/bin/env bash
# Medium under torchrun: what should the recipe train on two GPUs for 10 minutes or more? Under torchrun it trains
# small at every budget (ddp-curve: 0.7649 at 10 minutes, suite 0.7541, held out 0.7836), while one GPU trains medium
# from 10 minutes on; medium on two GPUs was never measured. Here: `--model-preset medium` under the recipe on two
# GPUs (its own lr 1e-3 x 2 ranks, warm-up 500, global batch 32), seed 0 on GPUs 0, 1 and seed 1 on GPUs 2, 3 at once,
# the prior made on the fly; 20 minutes with checkpoints at 3 and 10; each scored on one GPU (104 tasks, all 5
# splits, every baseline on the same splits).
# Rule written before the run: under torchrun the recipe trains medium for budgets of 10 minutes or more if the
# 10-minute two-seed suite mean is >= ddp-curve's 0.7541 + 0.001 = 0.7551 and the held-out mean is >= its 0.7836.
# The 3- and 20-minute points describe the curve whatever comes out.
# Commands (<= 600 s each, issued back to back; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
DATA=""                     # the recipe's own prior, made on the fly
BUDGET=${BUDGET:-600}; LONG=${LONG:-1200}; SAVE_AT=${SAVE_AT-180}   # run() adds BUDGET to the checkpoints
DEADLINE=${DEADLINE:-$((LONG + 300))}
declare -A FLAGS=()

driver() {
  NO_SCORE=1 run 0,1 mdp-s0 0 $LONG --model-preset medium & NO_SCORE=1 run 2,3 mdp-s1 1 $LONG --model-preset medium &
  wait
  score_one 0 mdp-s0 0 $BUDGET $LONG & score_one 1 mdp-s0 0 $LONG $LONG & score_one 2 mdp-s1 1 $BUDGET $LONG &
  score_one 3 mdp-s1 1 $LONG $LONG & wait
  score_one 0 mdp-s0 0 ${SAVE_AT%%,*} $LONG & score_one 2 mdp-s1 1 ${SAVE_AT%%,*} $LONG & wait
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
