#!/usr/bin/env bash
# Tables of 1024 rows that train on 50-500 rows as the real tasks do. The recipe's prior has 512 rows with a training
# share U(0.1, 0.9): 51-460 training rows (22 of the 104 tasks train on 500) and 52-461 test rows a table.
# `prior_dump.py --rows 1024 --train-law tasks` draws the training rows log-uniform on 50-500 (the tasks' rule 8) and
# leaves 524-974 test rows; at batch 8 a step holds the recipe's 8192 rows and each table gives 2.7x the test rows.
# One call on nvidia-h200 (one GPU, so the seeds run one after the other): `--recipe real-tables` (medium at 10
# minutes) on a 60k-table dump of that prior at `--batch-size 8`, seeds 0 and 1, 10 minutes each, each scored on the GPU
# (104 tasks, 5 splits, every baseline on the same splits). The control is the recipe as it ships on the same GPU kind
# and seeds: fresh-tables' recipe-s0/s1 at 600 s (0.7644 overall), which repeated recipe-30min's phase a step for step.
# Rule written before the run: the arm joins the recipe if its 10-minute mean (2 seeds) is >= the control's + 0.001
# and its held-out mean is not below the control's; #34's curve asks 10 minutes >= 1 minute (0.7612, curve-command's
# small on H200s) + 0.005.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
NUM_DATASETS=${NUM_DATASETS:-60000}
declare -A DUMPS=([rows1024]="--rows 1024 --train-law tasks")
DATA=${DATA:-/tmp/d/rows1024.h5}
SAVE_AT=""                                # the 10-minute checkpoint only
declare -A FLAGS=()

driver() {
  for seed in 0 1; do
    run 0 rows1024-s$seed $seed $BUDGET --batch-size 8
  done
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
