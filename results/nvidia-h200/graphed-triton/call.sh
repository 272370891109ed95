#!/usr/bin/env bash
# H200: the blog chain's last rows and the upstream chain's last rows with the graphed triton step beside them
# (benchmark.py, 2 interleaved repeats; records carried between calls in results/nvidia-h200/graphed-triton/ and joined
# with --resume). PHASE=seeds instead: 1000 steps of --fast, seeds 0-7, on one 1200-dataset blog dump, four runs at
# a time (results/nvidia-h100/logs/plateau-call.sh with CONFIGS=fast). PHASE=attention: benchmark.py --attention.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl \
  && export PYTHONPATH=/tmp/site || exit
export PYTHONUNBUFFERED=1
FINAL=${OUT:-/tmp/out}; W=/tmp/h2; mkdir -p "$W" "$FINAL"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/gpu.txt"
{ python -c "import benchmark; print('train_sources', benchmark.sources_digest(benchmark.TRAIN_SOURCES))"; LC_ALL=C sha256sum *.py; } | tee "$W/code.txt"
if [ "${PHASE:-chain}" = attention ]; then   # the datapoint attention alone, triton-padded beside the others
  python benchmark.py --attention --workloads blog --out "$W/attention" 2>&1 | tee "$W/attention.log"
  tar czf "$FINAL/attention.tgz" -C "$W" .
  exit
fi
if [ "${PHASE:-chain}" = seeds ]; then
  OUT=$W CONFIGS=fast SEEDS="0 1 2 3 4 5 6 7" LIMIT=${LIMIT:-330} bash results/nvidia-h100/logs/plateau-call.sh
  exit
fi
here=results/nvidia-h200/graphed-triton
[[ "${WORKLOADS:-blog upstream}" == *blog* ]] && python benchmark.py --workloads blog --repeats 2 --num-datasets 1200 --run-timeout 240 --resume \
  --budget-minutes ${BLOG_MINUTES:-7} --out $here --name chain-blog-tail \
  --configs +last-layer-target-only,+triton,+triton-graphs,fast 2>&1 | tee "$W/chain-blog-tail-call.log"
[[ "${WORKLOADS:-blog upstream}" == *upstream* ]] && python benchmark.py --workloads upstream --steps 120 --timing-warmup 20 --repeats 2 --run-timeout 200 --resume \
  --budget-minutes ${UP_MINUTES:-1} --out $here --name chain-upstream-tail \
  --configs +flex,fast 2>&1 | tee "$W/chain-upstream-tail-call.log"
cp $here/chain-*tail* "$W/" 2>/dev/null
tar czf "$FINAL/chain-tail.tgz" -C "$W" .
