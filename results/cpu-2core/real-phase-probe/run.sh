#!/usr/bin/env bash
# CPU probe of a last phase on real tables only (nvidia-h200/real-phase's plan), run from the repository root on the
# 2-core CPU: real-half's 10-minute medium models (inference copies, /tmp/ck-half/half-s{0,1}.pt, from that call)
# continue for 15 minutes on real_pool.py's tables only (`--init-from`, a new optimizer warmed up over 50 steps, one
# thread each, both seeds at once), then each is scored beside the model it started from on the first split of the 104
# tasks (quality.py score --splits 1, every baseline on that split).
set -eu
out=/tmp/rp; mkdir -p $out
python prior_dump.py --device cpu --no-progress --preset real --rows 512 --num-datasets 4000 --real-share 1.0 \
  --real-pool data/real_pool.npz --out $out/real.h5
for s in 0 1; do
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python train_optimized.py --recipe real-tables --model-preset medium \
    --data $out/real.h5 --init-from /tmp/ck-half/half-s$s.pt --warmup-steps 50 --seed $s --time-budget 900 \
    --no-eval --log-every 50 --ckpt $out/ft-s$s.pt --record $out/ft-s$s.json > $out/ft-s$s.log 2>&1 &
done
wait
for s in 0 1; do
  python quality.py score --device cpu --splits 1 --seed $s --out $out/score-s$s.json ft=$out/ft-s$s.pt \
    base=/tmp/ck-half/half-s$s.pt > $out/score-s$s.log 2>&1
done
