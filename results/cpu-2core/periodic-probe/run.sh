#!/usr/bin/env bash
# The CPU probe of --feature-encoding periodic (README.md): per seed, the recipe's prior and flags with the nano model,
# linear and periodic side by side (one thread each on the 2 cores) for 25 minutes, then steps.py and the real suite's
# first split. Run from the repository root: bash results/cpu-2core/periodic-probe/run.sh SEED
set -eu
seed=$1; out=runs/pcpu
mkdir -p $out
for enc in linear periodic; do
  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 train_optimized.py --recipe real-tables --model-preset nano \
    --feature-encoding $enc --seed $seed --time-budget 1500 --log-every 250 --no-eval \
    --ckpt $out/$enc-s$seed.pt --record $out/$enc-s$seed.json > $out/$enc-s$seed.log 2>&1 &
done
wait
python3 results/cpu-2core/inference-levers/step-functions/steps.py $out/linear-s$seed.pt $out/periodic-s$seed.pt \
  > $out/steps-s$seed.log 2>&1
for enc in linear periodic; do
  python3 quality.py score --device cpu --splits 1 --out $out/score-$enc-s$seed.json $enc=$out/$enc-s$seed.pt \
    > $out/score-$enc-s$seed.log 2>&1
done
