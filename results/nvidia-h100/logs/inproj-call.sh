#!/usr/bin/env bash
# One GPU call: the GPU tests on fc7324d (k/v projected from the train rows only); blog --fast and
# --fast --attention triton, new and old (.old/, 8074adc) interleaved; 60 s of upstream --fast saving a
# checkpoint (brought back for CPU inference work); classifier inference at 500 + 1000 rows on the GPU.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export LD_LIBRARY_PATH=/tmp/site/libkvikio/lib64:/tmp/site/libkvikio_cu13.libs:/tmp/site/rapids_logger/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data runs
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout 170 python -m pytest -q -x tests/test_model.py tests/test_gpu_train.py tests/test_triton_attention.py \
  > "$OUT/gpu-tests.log" 2>&1; echo "tests exit $? at ${SECONDS}s"; tail -1 "$OUT/gpu-tests.log"
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
python prior_dump.py --preset nano --num-datasets 300000 --out data/nano300k.h5 --no-progress >> "$OUT/dumps.log" 2>&1 &
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
run() {  # name dir limit flags...
  local name=$1 dir=$2 limit=$3; shift 3
  if [ "$SECONDS" -gt "$limit" ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 150 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
run blog-new-1 . 330 $blog --fast; run blog-old-1 .old 330 $blog --fast
run blog-new-triton . 330 $blog --fast --attention triton; run blog-old-triton .old 330 $blog --fast --attention triton
run blog-new-2 . 380 $blog --fast
wait
run up60 . 440 --fast --data data/nano300k.h5 --batch-size 32 --time-budget 60 --no-eval --log-every 5000 \
  --ckpt "$FINAL/up60.pt"
if [ -f "$FINAL/up60.pt" ]; then
  timeout 60 python - "$FINAL/up60.pt" > "$OUT/gpu-inference.log" 2>&1 <<'PY'
import sys, time, numpy as np, torch
from classifier import NanoTabPFNClassifier
rng = np.random.default_rng(0)
for f in (5, 16):
    X = rng.normal(size=(1500, f)); y = (X[:, 0] + rng.normal(size=1500) > 0).astype(int)
    clf = NanoTabPFNClassifier.from_checkpoint(sys.argv[1], device="cuda")
    for fa in ("matmul", "sdpa"):
        for block in clf.model.transformer_blocks: block.feature_attention = fa
        ts = []
        for _ in range(12):
            torch.cuda.synchronize(); t = time.perf_counter()
            p = clf.fit(X[:500], y[:500]).predict_proba(X[500:]); torch.cuda.synchronize(); ts.append(time.perf_counter() - t)
        ts = np.array(ts[2:]) * 1e3
        print(f"gpu inference {f} features, feature attention {fa}: median {np.median(ts):.1f} ms [{ts.min():.1f}-{ts.max():.1f}]")
PY
  cat "$OUT/gpu-inference.log"
fi
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
