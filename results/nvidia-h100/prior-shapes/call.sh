#!/usr/bin/env bash
# #34's curve (30 minutes beating 10): two shapes of the prior that differ most from the real tasks' shapes.
# - short: `prior_dump.py --train-law log`. The tasks' training rows run from 50 to 500, about log-uniform (median
#   135 in the suite, 155 held out; 30-34% under 100). The prior's are U(0.1, 0.9) of 512 (median 256, 12% under
#   100). From 10 to 20 minutes the recipe gained +0.0036 on tasks under 100 training rows and -0.0005 on those of
#   300 or more (feature-embedding): it is still learning the short tables, which the prior seldom shows it.
# - binary: `prior_dump.py --binary-share 0.7`. 74% of the tasks (77 of 104) are binary; the prior draws 2..10 classes
#   uniformly, so 11% of its tables are. 0.7 makes 73% of them binary.
# GPUs 0, 1: short, seeds 0 and 1; GPUs 2, 3: binary, seeds 0 and 1. 20 minutes each (medium, lr 1e-3, warm-up 500,
# batch 16, as the recipe), checkpoints at 3 and 10 minutes, each scored on its GPU (104 tasks, 5 splits, every
# baseline on the same splits). Beside them: feature-embedding's recipe runs, the same seeds on the same prior but
# for these options (prior:real:100000 = this call's dumps without them; its 10-minute runs repeated dp-seeds' to
# 0.0001 on another machine): 10 minutes 0.7644 overall, held out 0.7825; 20 minutes 0.7657.
# Rules written before the run: an option joins the recipe if its 10-minute mean overall (2 seeds) is >= the recipe's
# + 0.001 (0.7654) and its held-out mean is not below 0.7825; of two, the higher. The curve target counts only where
# a run's 20-minute mean is >= its 10-minute mean + 0.005.
# Then the CUDA loader tests (tests/test_gpu_loaders.py; not rerun since prior_dump's 6b9a11a) on GPU 0, cut at the
# deadline.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
LONG=${LONG:-1200}; BUDGET=${BUDGET:-600}; export SHORT_AT=${SHORT_AT:-180}
export DEADLINE=${DEADLINE:-$((LONG + 400))}
declare -A FLAGS=()   # each run's prior is its DATA, below
declare -A DUMPS=([short]="--train-law log" [binary]="--binary-share 0.7")

driver() {
  local pids=() gpu=0
  for name in short binary; do
    for seed in 0 1; do
      DATA=$D/$name.h5 SAVE_AT=$SHORT_AT run $gpu $name-s$seed $seed $LONG & pids+=($!)
      gpu=$((gpu + 1))
    done
  done
  wait ${pids[@]}
  local left=$(( DEADLINE - $(elapsed) - 25 ))
  if [ $left -gt 30 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout $left python -m pytest -q tests/test_gpu_loaders.py > $W/gpu-tests.log 2>&1
    echo "gpu loader tests at $(elapsed)s (cut at ${left}s if 124): exit $? $(tail -1 $W/gpu-tests.log)" >> $W/train.txt
  fi
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
