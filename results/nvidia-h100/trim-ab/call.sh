#!/usr/bin/env bash
# The tree of this stop (NEW) beside .old/ (OLD = 214b70e, the last --fast measured on a GPU), one H100.
# PHASE=a: wheels (kvikio, schedulefree; part aa of flash-attn-4's cu13 wheel to /tmp/fa4w), dumps, GPU tests.
# PHASE=b: flash-attn-4 assembled and installed; its tests; blog --fast (fa4 on Hopper) old/new interleaved twice.
# PHASE=c: upstream --fast (triton) old/new interleaved twice; blog --fast --attention triton old/new once each.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/ab-$PHASE; NEW=${NEW:-unknown}; OLD=${OLD:-unknown}; mkdir -p $W data /tmp/fa4w
if [ "$PHASE" = a ]; then
  cp .fa4a/cu13.part.aa /tmp/fa4w/
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
    2>&1 | grep -v "^WARNING: Target"
fi
if [ "$PHASE" = b ]; then
  cp .fa4b/cu13.part.ab /tmp/fa4w/ && cat /tmp/fa4w/cu13.part.aa /tmp/fa4w/cu13.part.ab \
    > /tmp/fa4w/nvidia_cutlass_dsl_libs_cu13-4.8.1-cp312-cp312-manylinux_2_28_x86_64.whl && rm /tmp/fa4w/cu13.part.*
  md5sum /tmp/fa4w/*.whl > $W/md5.txt
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/fa4site /tmp/fa4w/*.whl \
    .fa4b/*.whl 2>&1 | grep -v "^WARNING: Target"
fi
export PYTHONPATH=/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages:/tmp/fa4site:/tmp/site
export LD_LIBRARY_PATH=/tmp/site/libkvikio/lib64:/tmp/site/libkvikio_cu13.libs:/tmp/site/rapids_logger/lib64:${LD_LIBRARY_PATH:-}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code-new.txt; (cd .old && LC_ALL=C sha256sum *.py) > $W/code-old.txt
run() {  # name tree flags...: one train_optimized run, each tree with its own Inductor cache and commit name
  local name=$1 tree=$2; shift 2
  if [ "$SECONDS" -gt 520 ]; then echo "$name skipped (time)"; return; fi
  local dir=. commit=$NEW; [ "$tree" = old ] && dir=.old commit=$OLD
  (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$tree NANOTABPFN_GIT_COMMIT=$commit timeout 200 \
    python train_optimized.py "$@" --record $W/$name.json) > $W/$name.log 2>&1
  echo "$name exit $? at ${SECONDS}s"
}
up="--data $PWD/data/nano20k.h5 --batch-size 32 --steps 400 --timing-warmup 100 --no-eval --log-every 200 --fast"
blog="--data $PWD/data/blog600.h5 --batch-size 6 --steps 300 --timing-warmup 20 --no-eval --log-every 100 --fast"
case $PHASE in
a)
  python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress > $W/dumps.log 2>&1
  python prior_dump.py --preset blog --num-datasets 600 --out data/blog600.h5 --no-progress >> $W/dumps.log 2>&1
  md5sum data/*.h5 >> $W/dumps.log
  timeout 330 python -m pytest -q -p no:cacheprovider tests/test_gpu_loaders.py tests/test_gpu_train.py \
    tests/test_triton_attention.py > $W/gpu-tests.log 2>&1; echo "gpu tests exit $? at ${SECONDS}s"; tail -1 $W/gpu-tests.log
  timeout 150 python -m pytest -q -p no:cacheprovider tests/test_model.py tests/test_profile_utils.py tests/test_prior.py \
    tests/test_benchmark.py -k "cuda or gpu" > $W/gpu-tests-cuda.log 2>&1
  echo "cuda tests exit $? at ${SECONDS}s"; tail -1 $W/gpu-tests-cuda.log ;;
b)
  timeout 120 python -m pytest -q -p no:cacheprovider tests/test_fa4_attention.py > $W/fa4-tests.log 2>&1
  echo "fa4 tests exit $? at ${SECONDS}s"; tail -1 $W/fa4-tests.log
  for i in 1 2; do run blog-old-$i old $blog; run blog-new-$i new $blog; done ;;
c)
  for i in 1 2; do run up-old-$i old $up; run up-new-$i new $up; done
  run blog-triton-old old $blog --attention triton; run blog-triton-new new $blog --attention triton ;;
d)  # upstream --fast, old/new interleaved, each run compiling into a fresh Inductor cache of its own
  [ -f data/nano20k.h5 ] || python prior_dump.py --preset nano --num-datasets 20000 --out data/nano20k.h5 --no-progress \
    > $W/dumps.log 2>&1
  [ -d /tmp/site/schedulefree ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir \
    --target /tmp/site .wsf/*.whl 2>&1 | grep -v "^WARNING: Target"
  for i in 1 2 3; do
    for t in old new; do
      dir=.; commit=$NEW; [ $t = old ] && dir=.old commit=$OLD
      (cd $dir && TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$t-fresh-$i NANOTABPFN_GIT_COMMIT=$commit timeout 150 \
        python train_optimized.py $up --record $W/up-$t-fresh-$i.json) > $W/up-$t-fresh-$i.log 2>&1
      echo "up-$t-fresh-$i exit $? at ${SECONDS}s"
    done
  done ;;
e)  # the final tree: the test phase a's timeout cut, GPU resume tests, and --fast's resume on the GPU
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .wsf/*.whl .whl/*.whl \
    2>&1 | grep -v "^WARNING: Target"
  timeout 200 python -m pytest -q -p no:cacheprovider tests/test_triton_attention.py -k edited_kernel \
    > $W/edited-kernel-tests.log 2>&1; echo "edited-kernel tests exit $? at ${SECONDS}s"; tail -1 $W/edited-kernel-tests.log
  timeout 150 python -m pytest -q -p no:cacheprovider tests/test_gpu_train.py -k "resum or checkpoint" \
    > $W/gpu-resume-tests.log 2>&1; echo "gpu resume tests exit $? at ${SECONDS}s"; tail -1 $W/gpu-resume-tests.log
  python prior_dump.py --preset nano --num-datasets 4000 --out data/nano4k.h5 --no-progress > $W/dumps.log 2>&1
  f="--data $PWD/data/nano4k.h5 --batch-size 32 --no-eval --log-every 20 --fast --categorical-columns 0.3"
  export TORCHINDUCTOR_CACHE_DIR=/tmp/ind-e NANOTABPFN_GIT_COMMIT=$NEW
  python train_optimized.py $f --steps 60 --record $W/straight.json > $W/straight.log 2>&1; echo "straight exit $?"
  python train_optimized.py $f --steps 30 --ckpt $W/c.pt > $W/first.log 2>&1; echo "first 30 exit $?"
  python train_optimized.py $f --steps 60 --ckpt $W/c.pt --resume --seed 1 > $W/refused.log 2>&1
  echo "resume with --seed 1 exit $?: $(tail -1 $W/refused.log)"
  python train_optimized.py $f --steps 60 --ckpt $W/c.pt --resume --record $W/resumed.json > $W/resumed.log 2>&1
  echo "resume exit $?"; rm -f $W/c.pt
  python -c "import json,sys; a=json.load(open(sys.argv[1]))['extra']['losses']; b=json.load(open(sys.argv[2]))['extra']['losses']; print('resumed losses of steps 31-60 equal the straight run:', a[30:] == b[-30:], len(a), len(b))" $W/straight.json $W/resumed.json ;;
esac
python results/nvidia-h100/slim/table.py $W 2>/dev/null || python .carry/table.py $W
tar czf $OUT/ab-$PHASE.tgz -C $W .
