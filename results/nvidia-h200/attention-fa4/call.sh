#!/usr/bin/env bash
# benchmark.py --attention on the blog's shape with the step-as-called rows of triton and fa4 (PHASE=h, after part aa
# of the cu13 wheel came in the call before), and the GPU tests of the attention timers.
set -u
export PYTHONUNBUFFERED=1 NANOTABPFN_GIT_COMMIT=${COMMIT:-unknown}
W=/tmp/attnout; mkdir -p $W
cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
  > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
md5sum /tmp/fa4w/*.whl | tee $W/md5.txt
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
  .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt
timeout 150 python -m pytest -q tests/test_benchmark.py -k "graph or attention" > $W/gpu-tests.log 2>&1
echo "gpu tests exit $? at ${SECONDS}s"; tail -1 $W/gpu-tests.log
for i in 1 2; do
  timeout 200 python benchmark.py --attention --workloads blog --out $W/attention$i > $W/attention$i.log 2>&1
  echo "attention $i exit $? at ${SECONDS}s"
  grep -E "^\| (triton|fa4|flash|cudnn)[a-z-]* \| 2500|^\| (triton|fa4) \| 2500" $W/attention$i/attention.md | cut -c1-120
done
tar czf $OUT/attn.tgz -C $W .
