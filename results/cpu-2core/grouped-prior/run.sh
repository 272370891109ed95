#!/usr/bin/env bash
# Does nano learn the grouped tables' lookup from the prior? (2-core CPU; run from the repo root, files under /tmp/lk)
mkdir -p /tmp/lk
for g in 0 0.5; do   # training dumps: 20k tables of 128 rows, <= 8 features, 2 classes, seed 1
  python prior_dump.py --num-datasets 20000 --rows 128 --features 8 --classes 2 --out /tmp/lk/train-g$g.h5 \
    --device cpu --no-progress --grouped-rows $g --seed 1
done
for g in 0 1; do     # test tables: 256 of each kind, seed 99
  python prior_dump.py --num-datasets 256 --rows 128 --features 8 --classes 2 --out /tmp/lk/test-g$g.h5 \
    --device cpu --no-progress --grouped-rows $g --seed 99
done
for g in 0 0.5; do   # the two trainings side by side, one core each, 1500 steps of 32 tables
  OMP_NUM_THREADS=1 python train_optimized.py --fast --data /tmp/lk/train-g$g.h5 --batch-size 32 --steps 1500 \
    --seed 0 --no-eval --log-every 250 --ckpt /tmp/lk/long-g$g.pt > results/cpu-2core/grouped-prior/long-g$g.log 2>&1 &
done; wait
python results/cpu-2core/grouped-prior/eval.py /tmp/lk/long-g0.pt /tmp/lk/long-g0.5.pt | sed 's#/tmp/lk/##g' \
  > results/cpu-2core/grouped-prior/eval.log
python results/cpu-2core/grouped-prior/base.py > results/cpu-2core/grouped-prior/base.log
