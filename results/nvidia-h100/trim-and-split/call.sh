#!/usr/bin/env bash
# Old code beside new, --fast, each run its own process, interleaved. old = .old/ (a git archive of 9f589f9's *.py);
# mid = the new tree with old's triton_attention.py (the trim alone); new = the working tree (trim + split backward).
# argv: which runs, e.g. "up-old-1 up-new-1 blog-old-1 blog-mid-1 blog-new-1".
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/wt; rm -rf "$OUT"; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
[ -f data/blog600.h5 ] || python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress
[ -f data/nano20k.h5 ] || python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress
rm -rf .mid; mkdir .mid; cp *.py .mid/; cp .old/triton_attention.py .mid/
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
for name in "$@"; do
  if [ "$SECONDS" -gt "${GUARD:-470}" ]; then echo "$name skipped (time)"; continue; fi
  work=${name%-*}; tree=${work#*-}; work=${work%-*}
  dir=$([ "$tree" = new ] && echo . || echo ".$tree")
  flags=$([ "$work" = up ] && echo "$up" || echo "$blog")
  (cd "$dir" && timeout 200 python train_optimized.py $flags --fast --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
done
python results/nvidia-h100/slim/table.py "$OUT" | tee "$OUT/table.md"
tar czf "$FINAL/records-${TAG:-$1}.tgz" -C "$OUT" .
