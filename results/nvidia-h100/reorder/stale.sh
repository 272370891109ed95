#!/usr/bin/env bash
# Does torch.compile serve a stale triton kernel after its source changed? Two levels, one Inductor cache each:
# 1. tests/test_triton_attention.py -k edited_kernel on the tree (fix: SOURCE_DIGEST in the ops' arguments) and on a
#    copy with SOURCE_DIGEST = 0 (no fix);
# 2. blog-shaped --fast training (60-dataset dump, 40 steps): a0 (digest 0), then b0 (digest 0, _dkdv returns dv * 2),
#    then b1 (the same edit, digest live). b0 ending at a0's loss = the edit was not compiled.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}
LC_ALL=C sha256sum triton_attention.py tests/test_triton_attention.py | tee "$FINAL/code.txt"
timeout 240 python -m pytest -q tests/test_triton_attention.py -k edited_kernel > "$FINAL/test-fix.log" 2>&1
echo "fix: exit $? $(tail -1 "$FINAL/test-fix.log")"
tree() {  # tree NAME DIGEST EDIT
  rm -rf /tmp/$1 && mkdir /tmp/$1 && cp -r *.py tests /tmp/$1/
  [ "$2" = 0 ] && sed -i 's/^SOURCE_DIGEST = .*/SOURCE_DIGEST = 0/' /tmp/$1/triton_attention.py
  [ "$3" = 1 ] && sed -i 's/return dk \* SM_SCALE, dv$/return dk * SM_SCALE, dv * 2.0/' /tmp/$1/triton_attention.py
  echo "$1: $(grep -c '^SOURCE_DIGEST = 0' /tmp/$1/triton_attention.py) zero digest, $(grep -c 'dv \* 2.0' /tmp/$1/triton_attention.py) edit"
}
tree nofix 0 0
(cd /tmp/nofix && timeout 240 python -m pytest -q tests/test_triton_attention.py -k edited_kernel) > "$FINAL/test-nofix.log" 2>&1
echo "no fix: exit $? $(tail -1 "$FINAL/test-nofix.log")"
python prior_dump.py --preset blog --num-datasets 60 --out /tmp/blog60.h5 --no-progress > /dev/null
tree a0 0 0; tree b0 0 1; tree b1 1 1
for t in a0 b0 b1; do
  (cd /tmp/$t && TORCHINDUCTOR_CACHE_DIR=/tmp/inductor-shared timeout 200 python train_optimized.py --data /tmp/blog60.h5 \
    --batch-size 6 --steps 40 --timing-warmup 5 --no-eval --log-every 20 --fast) > "$FINAL/train-$t.log" 2>&1
  echo "$t: exit $? $(grep -E '^(compile|done)' "$FINAL/train-$t.log" | tr '\n' ' ' | cut -c1-200)"
done
