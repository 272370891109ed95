#!/usr/bin/env bash
# What ran after `bash call.sh start` on the same warm machine, verbatim (two commands), once `start` had been cut at
# 600 s: its `wait` for the four dumps also waited for the nvidia-smi logger started before it, so the driver never
# started (the dumps had finished in 49 s). The plan was cut to what the remaining 19 minutes held.
# Command 1 (returned after 556 s): four 10-minute runs, one per GPU, each scored on its GPU.
cp results/nvidia-h100/real-grouped/call.sh /tmp/call.sh; source /tmp/call.sh none; date +%s > $W/T0; rm -f $W/DONE*; export -f elapsed train score; export W CK D PYTHONPATH PYTHONUNBUFFERED
run1() { train $1 $2-s$3 $2-s$3 $2 $3 600; score $1 $2-s$3 $CK/$2-s$3.pt 10 $3; touch $W/DONE$1; }; export -f run1
for a in "0 grouped 0" "1 grouped 1" "2 trees 0" "3 trees 1"; do setsid nohup bash -c "run1 $a" > "$W/drv-${a// /-}.log" 2>&1 < /dev/null & done
sleep 60; tail -qn 2 $W/*-s?.log; while [ $(elapsed) -lt 555 ]; do sleep 5; done; cat $W/train.txt; tail -qn 1 $W/*-s?.log
# Command 2: medium for 200 steps on the 2000-table dump, with and without 6.3 GiB held on the GPU (GPUs 0, 1 once
# their runs ended). Its `pkill -f` matched its own command line and ended it before `pack` (rc -1); a third command
# ran `source /tmp/call.sh none; pack B '*.txt' '*.log' '*.json' '*.csv'`.
source /tmp/call.sh none; export -f elapsed; S=$SECONDS
st() { CUDA_VISIBLE_DEVICES=$1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$1 timeout 170 python -c "$3
import runpy, sys
sys.argv = ['train_optimized.py', '--recipe', 'real-tables', '--data', '$D/real2k.h5', '--model-preset', 'medium', '--lr', '1e-3', '--steps', '200', '--no-eval', '--log-every', '50']
runpy.run_path('train_optimized.py', run_name='__main__')" > $W/step-$2.log 2>&1; echo "step-$2 at $(elapsed)s: $(grep -E '^done|rror' $W/step-$2.log | tail -1 | cut -c1-200)" >> $W/train.txt; }
B="import torch; ballast = torch.empty(6_759_600_000 // 4, device='cuda')"
while [ ! -e $W/DONE0 ] && [ $((SECONDS-S)) -lt 200 ]; do sleep 3; done; st 0 medium-2k-ballast "$B" &
while [ ! -e $W/DONE1 ] && [ $((SECONDS-S)) -lt 200 ]; do sleep 3; done; st 1 medium-2k "" &
while [ $((SECONDS-S)) -lt 380 ] && ! { [ -e $W/DONE2 ] && [ -e $W/DONE3 ] && ! pgrep -f "real2k.h5" >/dev/null; }; do sleep 3; done
cat $W/train.txt; cat $W/score-*.log; pkill -f "nvidia-smi --query-gpu=timestamp"; pack B '*.txt' '*.log' '*.json' '*.csv'; ls -la $OUT
