#!/usr/bin/env bash
# The time-to-quality curve on two GPUs, the recipe as it ships. #34 asks the curve "on one GPU (2 GPUs where a
# two-GPU kind is lent)"; under torchrun the recipe trains its small model at every budget (lr 2e-3 x 2 ranks, warm-up
# 500, global batch 32), so one 10-minute run's checkpoints at 1 and 3 minutes are the recipe's own 1- and 3-minute
# models. On nvidia-h200-x4: seed 0 on GPUs 0, 1 and seed 1 on GPUs 2, 3, at once, the prior made on the fly
# (prior:real:100000); then the six checkpoints scored four at a time, one per GPU (104 tasks, all 5 splits, every
# baseline on the same splits).
# What it is measured against (written before the run): #34's curve asks 10 minutes >= 1 minute + 0.005 (two-seed
# mean over all 104 tasks). On one GPU the recipe gains +0.0032 (nvidia-h200/curve-command). Nothing changes in the
# code whatever comes out: this is the two-GPU curve as the recipe ships.
# Commands (<= 600 s each, issued back to back; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh finish
DATA=""                     # the recipe's own prior, made on the fly
SAVE_AT=60,180
DEADLINE=${DEADLINE:-1150}  # 600 s + compiling, then two rounds of scoring
declare -A FLAGS=()

driver() {
  NO_SCORE=1 run 0,1 dp-s0 0 $BUDGET & NO_SCORE=1 run 2,3 dp-s1 1 $BUDGET & wait
  score_one 0 dp-s0 0 600 600 & score_one 1 dp-s0 0 60 600 & score_one 2 dp-s1 1 600 600 &
  score_one 3 dp-s1 1 60 600 & wait
  score_one 0 dp-s0 0 180 600 & score_one 2 dp-s1 1 180 600 & wait
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
