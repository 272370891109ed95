#!/usr/bin/env bash
# #34 sanity on one H100, both runs at once on the GPU (their speed is not a figure): --recipe real-tables (nano) for
# 75 s on (a) the prior's real preset (30k datasets) and (b) nano's shape (150 rows x 5 features) with 2-10 classes,
# each scored on the real suite (binary tasks, 2 splits) at 25 s and 75 s of training.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
export PYTHONPATH=/tmp/site
W=/tmp/w; mkdir -p $W /tmp/ck /tmp/d
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt
python prior_dump.py --preset real --num-datasets 30000 --out /tmp/d/real.h5 --device cuda --no-progress > $W/dump.log 2>&1
python prior_dump.py --preset nano --classes 10 --num-datasets 100000 --out /tmp/d/nano10.h5 --device cuda --no-progress \
  >> $W/dump.log 2>&1; echo "dumps at ${SECONDS}s"; cat $W/dump.log
for name in real nano10; do
  (TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$name timeout 200 python train_optimized.py --recipe real-tables \
    --model-preset nano --lr 4e-3 --data /tmp/d/$name.h5 --time-budget 75 --save-at 25 --no-eval --log-every 200 \
    --ckpt /tmp/ck/$name.pt --record $W/$name.json > $W/$name.log 2>&1
   echo "$name exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$name.log | tail -1 | cut -c1-230)"
   python results/nvidia-h100/real-select/score.py $W/score-$name.json 2 $name-25s=/tmp/ck/$name-25s.pt \
     $name-75s=/tmp/ck/$name.pt > $W/score-$name.log 2>&1) &
done
wait
cat $W/score-*.log
tar czf $OUT/real-sanity.tgz -C $W .
