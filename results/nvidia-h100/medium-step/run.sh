#!/usr/bin/env bash
# Why did medium step at 229 ms in real-medium (100k-table dump, 20-minute runs) and at 149 ms in preset-steps
# (2000-table dump, --steps 150)? The same model and recipe on both dumps, in one call on one GPU.
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
LC_ALL=C sha256sum *.py > $OUT/code.txt
python prior_dump.py --preset real --rows 512 --num-datasets 2000 --out /tmp/small.h5 --device cuda --no-progress | tail -1
python prior_dump.py --preset real --rows 512 --num-datasets 100000 --out /tmp/big.h5 --device cuda --no-progress | tail -1
run() {  # name dump flags...
  local name=$1 dump=$2; shift 2
  timeout 170 python train_optimized.py --recipe real-tables --data $dump --model-preset medium --lr 1e-3 --no-eval \
    --log-every 50 "$@" > $OUT/$name.log 2>&1
  echo "$name: $(grep -E '^done|rror' $OUT/$name.log | tail -1 | cut -c1-200)"
}
run small-steps /tmp/small.h5 --steps 300
run big-steps /tmp/big.h5 --steps 300
run big-budget /tmp/big.h5 --time-budget 60 --seed 0 --save-at 30 --ckpt /tmp/m.pt --record $OUT/big-budget.json
