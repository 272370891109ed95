#!/usr/bin/env bash
# Does depth buy what steps do not (#34's 30-minute point)? At 10 minutes medium (8 layers) beat small (6) with half
# its steps, and from 10 to 20 minutes medium gained 0.0004 (curve-matmul). Large is medium with 12 layers.
# GPUs 2, 3: large-s0, -s1, lr 1e-3 with the recipe's warm-up, 20 minutes, checkpoints at 1, 3 and 10, scored on
#   the GPU (against curve-matmul's medium at 1, 3, 10 and 20 minutes, same seeds).
# GPUs 0, 1: the recipe's seeds 6 and 7 for 10 minutes (#34: eight seeds; 0-5 in curve-matmul and recipe-batch),
#   then large at lr 5e-4, seeds 0 and 1, for 10 minutes (is 1e-3 large's lr?).
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
LONG=${LONG:-1200}; BUDGET=${BUDGET:-600}
DEADLINE=$(( (LONG > 2 * BUDGET ? LONG : 2 * BUDGET) + 330 ))
declare -A FLAGS=([recipe]="" [large]="--model-preset large --lr 1e-3 --warmup-steps 500"
                  [large5]="--model-preset large --lr 5e-4 --warmup-steps 500")

driver() {
  local pids=()
  run 2 large-s0 0 $LONG ${FLAGS[large]} & pids+=($!)
  run 3 large-s1 1 $LONG ${FLAGS[large]} & pids+=($!)
  (run 0 recipe-s6 6 $BUDGET; run 0 large5-s0 0 $BUDGET ${FLAGS[large5]}) & pids+=($!)
  (run 1 recipe-s7 7 $BUDGET; run 1 large5-s1 1 $BUDGET ${FLAGS[large5]}) & pids+=($!)
  wait ${pids[@]}; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
