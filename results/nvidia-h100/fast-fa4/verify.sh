#!/usr/bin/env bash
# --fast picking FlashAttention-4 on long tables (214b70e), on one GPU. PHASE=e installs flash-attn-4 (part aa of its
# cu13 wheel came in the call before, in /tmp/fa4w), runs its GPU tests and upstream's --fast beside the triton step it
# keeps (interleaved); PHASE=f: the blog's --fast (now fa4) beside the same flags on triton, interleaved.
set -u
export PYTHONUNBUFFERED=1 NANOTABPFN_GIT_COMMIT=${COMMIT:-unknown}
W=/tmp/verifyout; mkdir -p $W
if [ "$PHASE" = e ]; then
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
if [ "$PHASE" = e ]; then
  timeout 240 python -m pytest -q tests/test_fa4_attention.py tests/test_train.py -k "fa4 or fast" > $W/gpu-tests.log 2>&1
  echo "gpu tests exit $? at ${SECONDS}s"; tail -3 $W/gpu-tests.log
  timeout 300 python benchmark.py --workloads upstream --repeats 2 --steps 120 --timing-warmup 20 \
    --configs fast,+triton-graphs --run-timeout 150 --out $W/upstream --name fast-upstream > $W/upstream.log 2>&1
  echo "upstream exit $? at ${SECONDS}s"; grep "^\[" $W/upstream.log
else
  timeout 420 python benchmark.py --workloads blog --repeats 2 --num-datasets 1200 --configs fast,+triton-graphs \
    --run-timeout 200 --budget-minutes 6 --out $W/blog --name fast-blog > $W/blog.log 2>&1
  echo "blog exit $? at ${SECONDS}s"; grep "^\[" $W/blog.log
fi
tar czf $OUT/verify-$PHASE.tgz -C $W .
