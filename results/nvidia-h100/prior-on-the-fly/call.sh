#!/usr/bin/env bash
# #34 item 1: the recipe's prior as a dump or generated on the fly, "whichever is faster (measure both)", on one H100.
# The dump: `prior_dump.py --preset real --rows 512` (100k datasets) made on the GPU, timed, then read by --loader
# resident (--fast's pick). On the fly: --loader prior makes each batch's datasets again on the GPU from the dump's seed
# (the same batches, checked bit for bit at start-up), in the training thread, or with --streams on a side stream
# from a thread, --prefetch 2 ahead. Each run trains the recipe with its seed 0 and its flags; the step times come from
# each run's record (CUDA events, data fetch inside the step). Medium (the 10-minute model) and small (1-3 minutes);
# medium's resident and side-stream runs again at the end, in reverse order. The GPU tests of the loaders, the graphed
# step and the training loop run first.
# Commands (carry .whl; each <= 600 s; issue the second as soon as the first returns): bash call.sh start; bash call.sh finish
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH=/tmp/site
W=/tmp/w; D=/tmp/d; mkdir -p $W $D
BUDGET=${BUDGET:-30}; DEV=${DEV:-cuda}; NUM_DATASETS=${NUM_DATASETS:-100000}; DRY=${DRY:-}
MEDIUM="--model-preset medium --lr 1e-3 --warmup-steps 500"; SMALL="--model-preset small --lr 2e-3"
run() {  # name model-flags loader-flags...
  local name=$1 model=$2; shift 2
  python train_optimized.py --recipe real-tables --data $D/real512.h5 $model "$@" --seed 0 --time-budget $BUDGET \
    --no-eval --log-every 500 --record $W/$name.json $DRY > $W/$name.log 2>&1
  echo "$name exit $?: $(grep -E 'data path|prior:|done:|rror' $W/$name.log | tr -s ' ' | cut -c1-260 | tr '\n' ' ')" >> $W/runs.txt
}
driver() {
  run medium-resident "$MEDIUM" --loader resident
  run medium-prior "$MEDIUM" --loader prior
  run medium-prior-streams "$MEDIUM" --loader prior --streams
  run small-resident "$SMALL" --loader resident
  run small-prior "$SMALL" --loader prior
  run small-prior-streams "$SMALL" --loader prior --streams
  run medium-prior-streams-2 "$MEDIUM" --loader prior --streams
  run medium-resident-2 "$MEDIUM" --loader resident
  python results/nvidia-h100/prior-on-the-fly/steps.py $W/*.json > $W/steps.md 2>&1; touch $W/DONE
}
case ${1:-} in
start)
  date +%s > $W/T0
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee $W/gpu.txt
  (git rev-parse HEAD; git status --short; LC_ALL=C sha256sum *.py) > $W/code.txt 2>/dev/null
  python prior_dump.py --device $DEV --no-progress --preset real --rows 512 --num-datasets $NUM_DATASETS \
    --out $D/real512.h5 > $W/dump-real512.log 2>&1; tail -1 $W/dump-real512.log
  python -m pytest -q tests/test_gpu_loaders.py tests/test_gpu_train.py > $W/gpu-tests.log 2>&1; tail -2 $W/gpu-tests.log
  export -f run driver; export W D BUDGET DRY MEDIUM SMALL
  setsid nohup bash -c driver > $W/driver.log 2>&1 < /dev/null &
  while [ $(( $(date +%s) - $(cat $W/T0) )) -lt ${HOLD:-560} ] && [ ! -e $W/DONE ]; do sleep 5; done
  cat $W/runs.txt
  ;;
finish)
  while [ ! -e $W/DONE ] && [ $SECONDS -lt ${HOLD:-560} ]; do sleep 5; done
  cat $W/runs.txt $W/steps.md $W/driver.log; tar cf $OUT/r.tar -C $W .
  ;;
esac
