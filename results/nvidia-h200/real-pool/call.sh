#!/usr/bin/env bash
# Real tables beside the prior. The recipe's model keeps learning the prior after 10 minutes while the real tasks stop
# following it (prior-fit); here a share of its training tables are real ones that no task comes from: real_pool.py's
# 208 Rdatasets tables (no suite or held-out table, none sharing most of its columns with one, none of SAME_DATA), each
# draw a random target column, rows, columns and class order. `prior_dump.py --real-share 0.25` writes the recipe's
# 100k-table dump (`--preset real`, seed 0, made on the GPU: the tables of `prior:real:100000`) with a quarter of its
# 32-table blocks real draws, and `--recipe real-tables` (medium) trains on it.
# PHASE=a (nvidia-h200-x2, one seed a GPU): seeds 0 and 1, 10 minutes, each scored on its GPU (104 tasks, 5 splits,
# every baseline on the same splits). The control is the recipe as it ships on the same GPU kind and seeds:
# fresh-tables' recipe-s0/s1, 0.7644 overall at 10 minutes (held out 0.7822), 0.7658 at 20 (held out 0.7837).
# Rule written before the run: real tables join the recipe if the 10-minute mean (2 seeds) is >= 0.7644 + 0.001 and
# the held-out mean is not below 0.7822.
# PHASE=b, on the same machine at once: those runs resumed to 20 minutes (FROM=600), against the control's 0.7658.
# Commands (<= 600 s each; issue each as soon as the last returns; carry data/real_pool.npz, the 4 suite/baseline
# caches and .whl): bash call.sh start; bash call.sh finish; PHASE=b bash call.sh start; PHASE=b bash call.sh finish
export PHASE=${PHASE:-a} SHARE=${SHARE:-0.25} NUM_DATASETS=${NUM_DATASETS:-100000}
LONG=${LONG:-1200}; export LONG
declare -A DUMPS=([mix]="--real-share $SHARE --real-pool data/real_pool.npz")
DATA=${DATA:-/tmp/d/mix.h5}
SAVE_AT=""                                # the budget's checkpoint only
DEADLINE=${DEADLINE:-$([ $PHASE = a ] && echo 1000 || echo 800)}   # seconds after start; `wait` is not needed
declare -A FLAGS=()

driver() {
  local pids=()
  for seed in 0 1; do
    if [ $PHASE = a ]; then run $seed mix-s$seed $seed $BUDGET & pids+=($!)
    else FROM=$BUDGET BUDGET=$LONG run $seed mix-s$seed $seed $LONG & pids+=($!)
    fi
  done
  wait "${pids[@]}"
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
[ $PHASE = b ] && { DUMPS=(); rm -f /tmp/w/DONE; }   # phase a's dump and checkpoints stay on the machine
source results/nvidia-h100/call-lib.sh "$@"
