#!/usr/bin/env bash
# One GPU call: 30 s of upstream --fast --categorical-columns 0.1, the old transform (.old/ = the commit before)
# beside the new, no eval; the final lines give steps, ms/step and data wait.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
mkdir -p data/bench "$OUT"; dump=$PWD/data/bench/prior-n50000-r150-f5-c2-s0-cuda.h5
[ -f $dump ] || python -c "import prior_dump; prior_dump.write_dump('$dump', 50000, 150, 5, 2, 0, device='cuda')" > /dev/null 2>&1
for tree in new old new old; do
  dir=.; [ $tree = old ] && dir=.old; log="$OUT/$tree-$SECONDS.log"
  (cd $dir && python train_optimized.py --data $dump --batch-size 32 --fast --time-budget 30 --no-eval --seed 0 \
    --categorical-columns 0.1 --log-every 5000 > "$log" 2>&1)
  echo "$tree: $(grep -h '^done:' "$log" | cut -c1-170)"
done
