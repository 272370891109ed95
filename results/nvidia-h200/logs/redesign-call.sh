#!/usr/bin/env bash
# One GPU call: the pre-redesign code (.old/, commit cdd98b7) beside the new code, --fast on both workloads,
# interleaved old/new, then the GPU tests, then --attention triton, then a second old/new repeat.
set -u
if [ -d .wsf ]; then python3 -m pip install -q --no-index --no-deps --target /tmp/site .wsf/*.whl && export PYTHONPATH=/tmp/site; fi
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data   # many files: packed into one at the end
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress >> "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
run() {  # name dir flags...; skipped once the call's time is nearly spent
  local name=$1 dir=$2; shift 2
  if [ "$SECONDS" -gt 430 ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 300 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $?"
}
run up-old-1 .old $up --fast; run up-new-1 . $up --fast
run blog-old-1 .old $blog --fast; run blog-new-1 . $blog --fast
timeout 150 python -m pytest -q tests/test_gpu_train.py tests/test_triton_attention.py > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $?"; tail -3 "$OUT/gpu-tests.log"
run blog-new-triton . $blog --fast --attention triton
run up-old-2 .old $up --fast; run up-new-2 . $up --fast
run blog-old-2 .old $blog --fast; run blog-new-2 . $blog --fast
python - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
print("| run | ms/step median | p10 | p90 | peak GiB | final loss | kernel |")
print("|---|---|---|---|---|---|---|")
for name in sorted(f[:-5] for f in os.listdir(out) if f.endswith(".json")):
    try:
        r = json.load(open(os.path.join(out, name + ".json")))
        e, s = r.get("extra", r), r["timing"]["step"]
    except Exception as exc:
        print(f"| {name} | unreadable: {exc} |"); continue
    kernel = e.get("attention_kernel") or e.get("sdpa_backend") or ""
    print(f"| {name} | {s['median']:.3f} | {s['p10']:.3f} | {s['p90']:.3f} | {e['peak_memory_bytes']/2**30:.2f} | "
          f"{e['final_loss']:.4f} | {kernel[:40]} |")
PY
tar czf "$FINAL/call.tgz" -C "$OUT" .
