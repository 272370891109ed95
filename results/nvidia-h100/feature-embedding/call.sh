#!/usr/bin/env bash
# #34's two open targets (30 minutes beating 10, +0.01 on the wide tables): does TabPFN v2's column embedding, which
# nano lacks, buy quality, and does it keep buying it past 10 minutes? `--feature-embedding` adds to each cell a
# learned projection of a fixed random code for its column position, so equal columns differ from the first layer on.
# GPUs 0, 1: the recipe with --feature-embedding, seeds 0 and 1, 20 minutes, checkpoints at 3 and 10 minutes.
# GPUs 2, 3: the recipe as it is beside them, seeds 0 and 1, 20 minutes, a checkpoint at 10 (dp-seeds trained these
#   seeds for 10 minutes on the same data: 0.7643 together).
# Every checkpoint scored on its GPU on every split. Then the GPU tests of the graphed step on GPUs 2, 3 (the capture
# mode changed in d85ceee; two GPUs let its NCCL test run).
# Rules written before the run: --feature-embedding is adopted if its 10-minute mean (overall, 2 seeds) is above the
# recipe's beside it; the curve target is met only if a run's 20-minute mean is >= its 10-minute mean + 0.005.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
LONG=${LONG:-1200}; BUDGET=${BUDGET:-600}; export CODED_AT=${CODED_AT:-180}
DATA=""                                   # the recipe's own data, made on the fly
DEADLINE=${DEADLINE:-$((LONG + 330))}
declare -A FLAGS=([coded]="--feature-embedding" [recipe]="")

driver() {
  local pids=()
  SAVE_AT=$CODED_AT run 0 coded-s0 0 $LONG ${FLAGS[coded]} & pids+=($!)
  SAVE_AT=$CODED_AT run 1 coded-s1 1 $LONG ${FLAGS[coded]} & pids+=($!)
  SAVE_AT=$BUDGET BUDGET=$LONG run 2 recipe-s0 0 $LONG & pids+=($!)
  SAVE_AT=$BUDGET BUDGET=$LONG run 3 recipe-s1 1 $LONG & pids+=($!)
  wait ${pids[2]} ${pids[3]}
  CUDA_VISIBLE_DEVICES=2,3 python -m pytest -q tests/test_gpu_train.py > $W/gpu-tests.log 2>&1
  echo "gpu tests at $(elapsed)s: $(tail -1 $W/gpu-tests.log)" >> $W/train.txt
  wait ${pids[@]}; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
