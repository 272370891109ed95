#!/usr/bin/env bash
# FlashAttention-4 on one H200: PHASE=b installs flash-attn-4 and its CUTLASS DSL (the cu13 wheel came in two calls,
# part aa in /tmp/fa4w), runs the GPU tests of --attention fa4, then blog --fast beside --fast with fa4, interleaved.
# PHASE=c: the same A/B on upstream's workload, and benchmark.py --attention (the fa4 rows beside the others).
set -u
export PYTHONUNBUFFERED=1 NANOTABPFN_GIT_COMMIT=${COMMIT:-unknown}
W=/tmp/fa4out; mkdir -p $W
if [ "$PHASE" = b ] || [ "$PHASE" = d ]; then
  cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
    > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
  md5sum /tmp/fa4w/*.whl | tee $W/md5.txt
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
    .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl 2>&1 \
    | grep -v "^WARNING: Target"
fi
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site:/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code-$PHASE.txt
if [ "$PHASE" = d ]; then
  timeout 220 python -m pytest -q tests/test_fa4_attention.py > $W/gpu-tests-d.log 2>&1
  echo "gpu tests exit $? at ${SECONDS}s"; tail -3 $W/gpu-tests-d.log; grep -E "^FAILED|Error:" $W/gpu-tests-d.log | head
  python prior_dump.py --preset blog --num-datasets 1200 --out data/blog1200.h5 --no-progress > $W/dumps.log 2>&1
  export BLOG="--data $PWD/data/blog1200.h5 --batch-size 6 --steps 1000 --timing-warmup 20 --no-eval --log-every 250"
  export W T0=$(date +%s)
  one() {  # 1000 steps of --fast (which picks fa4 here) or of --fast --attention triton; four runs share the GPU
    local flags="--fast"; [ "$1" = triton ] && flags="--fast --attention triton"
    timeout 300 python train_optimized.py $BLOG $flags --seed $2 --record $W/q-$1-s$2.json > $W/q-$1-s$2.log 2>&1
    echo "$1-s$2 exit $? at $(( $(date +%s) - T0 ))s"
  }
  export -f one
  for seed in 0 1 2 3; do for c in fast triton; do echo "$c $seed"; done; done | xargs -P 4 -L 1 bash -c 'one $0 $1'
  python3 - $W <<'PY' | tee $W/quality.md
import glob, json, os, statistics, sys
print("| run | attention kernel | steps 1-100 | 451-550 | 901-1000 |\n|---|---|---|---|---|")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "q-*.json"))):
    e = json.load(open(path))["extra"]; L = e["losses"]
    w = lambda a, b: f"{statistics.mean(L[a:b]):.4f}" if len(L) >= b else "n/a"
    print(f"| {os.path.basename(path)[2:-5]} | {e.get('attention_kernel', '')[:40]} | {w(0, 100)} | {w(450, 550)} | {w(900, 1000)} |")
PY
elif [ "$PHASE" = b ]; then
  timeout 200 python -m pytest -q tests/test_fa4_attention.py tests/test_benchmark.py -k "fa4 or graph" > $W/gpu-tests.log 2>&1
  echo "gpu tests exit $? at ${SECONDS}s"; tail -3 $W/gpu-tests.log
  timeout 330 python benchmark.py --workloads blog --repeats 2 --num-datasets 1200 --configs fast,+fa4-graphs \
    --run-timeout 200 --budget-minutes 4.2 --out $W/blog --name fa4-blog > $W/fa4-blog.log 2>&1
  echo "blog exit $? at ${SECONDS}s"; grep "^\[" $W/fa4-blog.log
else
  timeout 240 python benchmark.py --workloads upstream --repeats 2 --steps 120 --timing-warmup 20 \
    --configs fast,+fa4-graphs --run-timeout 150 --out $W/upstream --name fa4-upstream > $W/fa4-upstream.log 2>&1
  echo "upstream exit $? at ${SECONDS}s"; grep "^\[" $W/fa4-upstream.log
  timeout 200 python benchmark.py --attention --workloads blog --out $W/attention > $W/attention.log 2>&1
  echo "attention exit $? at ${SECONDS}s"; grep -E "^\| (kernel|[a-z0-9-]+ \| 2500)" $W/attention/attention.md | cut -c1-160
fi
tar czf $OUT/fa4-$PHASE.tgz -C $W .
