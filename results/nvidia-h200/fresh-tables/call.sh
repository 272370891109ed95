#!/usr/bin/env bash
# Does the recipe's 30-minute point stall because its prior repeats? `--recipe real-tables` trains on prior:real:100000
# (100k tables made on the fly, read in order and wrapped): 10 minutes of medium on an H200 read 157k tables (the
# first 57k twice), 20 minutes 311k (3.1 times each), 30 minutes 466k (4.7 times). prior:real:1000000 holds the same
# first 100k tables (N tables are a prefix of M > N) and 900k more, so a run on it sees every table once up to an
# hour; its batches equal the recipe's until the recipe wraps (step 6250), and after that the two runs' training
# losses differ by what repetition does.
# One call on nvidia-h200-x4: GPUs 0, 1 `--data prior:real:1000000` (fresh), GPUs 2, 3 the recipe as it ships
# (control), seeds 0 and 1, 20 minutes each with a checkpoint at 10, each scored on its GPU (104 tasks, 5 splits,
# every baseline on the same splits). The fresh runs' whole 20-minute checkpoints come back for a later --resume to 30.
# Rule written before the run: fresh tables join the recipe (recipes.DUMP_DATASETS["cuda"] = 1,000,000) if their
# 20-minute mean (2 seeds) is >= the control's 20-minute mean + 0.001 and their held-out mean is not below the
# control's; #34's curve counts a gain only at its 30-minute point, against phase b's 10-minute mean + 0.005.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; KEEP_STATE=fresh-s0 bash call.sh finish; bash call.sh state fresh-s1
LONG=${LONG:-1200}; BUDGET=${BUDGET:-600}; export LONG
DATA=""                                   # the recipe's own data, made on the fly
FRESH=${FRESH:-prior:real:1000000}
DEADLINE=${DEADLINE:-$((LONG + 330))}
declare -A FLAGS=()

driver() {
  local pids=()
  for seed in 0 1; do
    DATA=$FRESH SAVE_AT=$BUDGET BUDGET=$LONG run $seed fresh-s$seed $seed $LONG & pids+=($!)
    SAVE_AT=$BUDGET BUDGET=$LONG run $((seed + 2)) recipe-s$seed $seed $LONG & pids+=($!)
  done
  wait ${pids[@]}; echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
if [ "${1:-}" = state ]; then   # state NAME: the whole checkpoint $CK/NAME.pt as 15 MiB parts under $OUT
  sha256sum /tmp/ck/$2.pt; split -b 15M /tmp/ck/$2.pt $OUT/$2.pt.part-; ls -la $OUT; exit
fi
export FRESH
source results/nvidia-h100/call-lib.sh "$@"
