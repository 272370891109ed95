#!/usr/bin/env bash
# Two GPUs against one, both scored with the classifier's linear columns (since ac2aabe) in the same call (#34's
# moonshot: 2 GPUs reach one GPU's 10-minute quality in <= 6 minutes). curve-matmul's two-GPU run (seed 0: the
# recipe under torchrun, small at lr 4e-3 with warm-up 500) scored 0.7624 after 5 minutes, against one GPU's 10
# minutes of the recipe (medium, eight seeds: 0.7614), with the classifier before; one seed is not a mean.
# GPUs 0, 1: the recipe on one GPU, seeds 0 and 1, 10 minutes (checkpoints at 1 and 3).
# GPUs 2, 3: `torchrun --nproc_per_node 2`, seed 1 then seed 2, 6 minutes each (checkpoints at 3 and 5). Since
# 65c7eea the budget and the checkpoints land at their time under torchrun (before: the first log point past it).
# Then, alone on the machine, `quality.py latency` (#34: <= 100 ms with the largest preset), linear columns off and on.
# The rule, written before the run: the moonshot holds if the two-GPU mean over seeds 1 and 2 at 5 or at 6 minutes
# is >= the one-GPU mean over seeds 0 and 1 at 10 minutes.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
BUDGET=${BUDGET:-600}; SAVE_AT=${SAVE_AT:-60,180}
export DP=${DP:-360} DP_AT=${DP_AT:-180,300}   # exported: the driver runs in its own shell
DEADLINE=${DEADLINE:-$((2 * DP + 530))}   # the dump (~50 s), then on GPUs 2, 3 two runs, each ~70 s compiling + 140 scoring
declare -A FLAGS=([recipe]="" [dp]="")
KEEP="recipe-s0 recipe-s1"   # the 10-minute checkpoints, for the classifier's levers on the CPU

driver() {
  (run 0 recipe-s0 0 $BUDGET) & local a=$!
  (run 1 recipe-s1 1 $BUDGET) & local b=$!
  (SAVE_AT=$DP_AT run 2,3 dp-s1 1 $DP; SAVE_AT=$DP_AT run 2,3 dp-s2 2 $DP) & local c=$!
  wait $a $b $c
  # alone on the machine: the linear columns' logistic fits run on its CPU, inside the timed call
  CUDA_VISIBLE_DEVICES=0 python quality.py latency --out $W/latency-large.json > $W/latency-large.log 2>&1
  CUDA_VISIBLE_DEVICES=0 python quality.py latency --out $W/latency-medium.json $CK/recipe-s0.pt \
    > $W/latency-medium.log 2>&1
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
