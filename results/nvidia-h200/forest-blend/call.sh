#!/usr/bin/env bash
# Forest columns in half the ensemble (forest_columns="half"), the pick of forest-blend's choice
# (results/cpu-2core/inference-levers/forest-blend), on all 5 splits of all 104 tasks, for the 10-minute recipe models
# of seeds 0 and 1 (dp-seeds' recipe10-sS.pt, scored without forest columns in stored-scores on this GPU kind), both
# scorings at once on one GPU; then `quality.py latency` on the idle GPU (the large preset, random weights).
# CKD=data/ck20 MIN=20 LATENCY="": the same for the 20-minute models (recipe-30min's, their inference copies).
# Commands (<= 600 s each, back to back; carry data/ck10 or data/ck20, the 4 suite/baseline caches):
#   bash call.sh start; bash call.sh finish
set -u
export PYTHONUNBUFFERED=1
W=/tmp/fb; CKD=${CKD:-data/ck10}; MIN=${MIN:-10}; mkdir -p $W
case $1 in
start)
  date +%s > /tmp/fb-T0
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
  git rev-parse HEAD > $W/code.txt; git status --short >> $W/code.txt; LC_ALL=C sha256sum *.py >> $W/code.txt
  for s in 0 1; do
    setsid nohup python quality.py score --device cuda --splits 5 --minutes $MIN --seed $s --forest-columns half \
      --out $W/score-half-s$s-$((MIN * 60))s.json half=$(ls $CKD/*-s$s.pt) > $W/score-half-s$s.log 2>&1 < /dev/null &
  done
  while [ $(ls $W/score-half-s*.json 2>/dev/null | wc -l) -lt 2 ] && [ $(( $(date +%s) - $(cat /tmp/fb-T0) )) -lt 570 ]; do
    sleep 5; done
  tail -n 2 $W/*.log
  ;;
finish)
  while [ $(ls $W/score-half-s*.json 2>/dev/null | wc -l) -lt 2 ] && [ $SECONDS -lt 400 ]; do sleep 5; done
  echo "scored at $(( $(date +%s) - $(cat /tmp/fb-T0) )) s"
  [ -n "${LATENCY-1}" ] && python quality.py latency --device cuda --out $W/latency.json > $W/latency.log 2>&1
  tail -n 3 $W/*.log; cp $W/* $OUT/
  ;;
esac
