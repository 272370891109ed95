#!/usr/bin/env bash
# One GPU call: the triton_op kernel (.tri/ = branch tritonop 617dead: fc7324d + the kernel as torch.library
# triton_ops, traced by torch.compile) checked under Inductor and by the GPU kernel tests, then blog --fast with
# --attention triton (.tri) beside --fast's flash on fc7324d (.) and on 8074adc (.old, before the k/v change).
set -u
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
(cd .tri && timeout 150 python runs/compile_check.py) > "$OUT/compile-check.log" 2>&1
echo "compile_check exit $? at ${SECONDS}s"; grep -E "PASS|FAIL|Error" "$OUT/compile-check.log" | head -8
(cd .tri && timeout 120 python -m pytest -q -x tests/test_triton_attention.py) > "$OUT/tri-tests.log" 2>&1
echo "tri kernel tests exit $? at ${SECONDS}s"; tail -1 "$OUT/tri-tests.log"
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
run() {  # name dir limit flags...
  local name=$1 dir=$2 limit=$3; shift 3
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 170 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"; grep -h "^done" "$OUT/$name.log"
}
run blog-tri-triton .tri 420 $blog --fast --attention triton
run blog-new-flash . 420 $blog --fast
run blog-old-flash .old 420 $blog --fast
tar czf "$FINAL/call.tgz" -C "$OUT" .
