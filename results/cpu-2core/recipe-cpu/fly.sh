#!/usr/bin/env bash
# --recipe real-tables on this 2-core CPU with its data as a file and made on the fly (the recipe's default since
# 759e867), the same 30 steps each (seed 0: the same batches). Run from the repository root:
#   bash results/cpu-2core/recipe-cpu/fly.sh > results/cpu-2core/recipe-cpu/fly.log
set -u
T=$(mktemp -d)
lscpu | grep "Model name"
/usr/bin/time -f "the file: %e s wall" python prior_dump.py --preset real --num-datasets 4000 --out $T/real.h5 \
  --no-progress 2>&1 | tail -1
for data in $T/real.h5 prior:real:4000; do
  python train_optimized.py --recipe real-tables --data $data --steps 30 --seed 0 --no-eval --log-every 30 \
    --record $T/r.json 2>&1 | grep -E "data path|^done:"
  python -c "import json, sys; print('losses:', [round(x, 4) for x in json.load(open(sys.argv[1]))['extra']['losses']][:6])" $T/r.json
done
rm -rf $T
