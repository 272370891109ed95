#!/usr/bin/env bash
# One GPU call after the line-count redesign: the GPU tests on the new code, then --fast on both workloads,
# old (.old/, commit c472d21) and new interleaved, then the copy-paste command (--flash --gds-bin) with kvikio.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export LD_LIBRARY_PATH=/tmp/site/libkvikio/lib64:/tmp/site/libkvikio_cu13.libs:/tmp/site/rapids_logger/lib64:${LD_LIBRARY_PATH:-}
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
FINAL=${OUT:-/tmp/out}; OUT=/tmp/w; mkdir -p "$OUT" "$FINAL" data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python -c "import kvikio; print('kvikio', kvikio.__version__)" 2>&1 | tail -1
python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress > "$OUT/dumps.log" 2>&1
python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress >> "$OUT/dumps.log" 2>&1
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 100 --timing-warmup 10 --no-eval --log-every 50"
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200"
run() {  # name dir flags...; skipped once the call's time is nearly spent
  local name=$1 dir=$2; shift 2
  if [ "$SECONDS" -gt ${LIMIT:-470} ]; then echo "$name skipped (time)"; return; fi
  (cd "$dir" && timeout 200 python train_optimized.py "$@" --record "$OUT/$name.json") > "$OUT/$name.log" 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
timeout 260 python -m pytest -q -p no:cacheprovider tests/test_gpu_loaders.py tests/test_gpu_train.py \
  tests/test_triton_attention.py tests/test_model.py tests/test_profile_utils.py > "$OUT/gpu-tests.log" 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -3 "$OUT/gpu-tests.log"
run up-old-1 .old $up --fast; run up-new-1 . $up --fast
run blog-old-1 .old $blog --fast; run blog-new-1 . $blog --fast
run blog-new-flash-gds . $blog --flash --gds-bin
run up-old-2 .old $up --fast; run up-new-2 . $up --fast
run blog-old-2 .old $blog --fast; run blog-new-2 . $blog --fast
grep -h "gds\|kvikio" "$OUT/blog-new-flash-gds.log" | head -4
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
