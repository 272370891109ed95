#!/usr/bin/env bash
# --recipe real-tables on this 2-core CPU (no GPU): its dump, its steps at the CPU batch (4), and 2 steps at the GPU's
# batch (16) with the peak memory. Run from the repository root: bash results/cpu-2core/recipe-cpu/run.sh > ...log
set -u
T=$(mktemp -d)
python -c "
import time, prior_dump
start = time.perf_counter()
prior_dump.ensure_default_dump(path='$T/real.h5', preset='real', num_datasets=4000, device='cpu')
print(f'dump: {time.perf_counter() - start:.1f} s')" 2>&1 | tail -2
python train_optimized.py --recipe real-tables --data $T/real.h5 --time-budget 60 --no-eval --ckpt $T/r.pt 2>&1 |
  grep -E "^--recipe|^done:"
for batch in 16 4; do
  /usr/bin/time -f "batch $batch: peak memory %M KB, %e s wall" python train_optimized.py --recipe real-tables \
    --data $T/real.h5 --batch-size $batch --steps 2 --timing-warmup 0 --no-eval 2>&1 | grep -E "^done:|peak memory"
done
rm -rf $T
