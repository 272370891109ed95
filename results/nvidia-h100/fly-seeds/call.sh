#!/usr/bin/env bash
# Four more seeds of the recipe as a user runs it now: `train_optimized.py --recipe real-tables` with no --data trains
# on prior:real:100000, the real preset made on the fly (--loader prior, generated on a side stream), where before it
# built data/real_default_100000_seed0_cuda.h5 first (39 s on an H100). Seeds 2-5, one per H100, 10 minutes each
# (checkpoints at 1 and 3), every checkpoint scored on its GPU on every split: with dp-seeds' seeds 0 and 1 (the file,
# the same classifier) the headline rests on six seeds. Checks, written before the run: every per-step loss finite;
# each checkpoint's data identity (shapes, metadata hash, content digest of 16 datasets) equals that of dp-seeds'
# checkpoints (content 52dfba27..., the file made on another H100); then the GPU tests of --loader prior.
# Commands (<= 600 s each; issue each as soon as the last returns; carry the 4 suite/baseline caches and .whl):
#   bash call.sh start; bash call.sh wait; bash call.sh finish
BUDGET=${BUDGET:-600}; SAVE_AT=${SAVE_AT:-60,180}
DATA=""                                  # the recipe's own data: made on the fly
DEADLINE=${DEADLINE:-$((BUDGET + 420))}  # one phase: compile (~60 s), 600 s, three scorings (~40 s each), the tests
declare -A FLAGS=([recipe]="")

driver() {
  for gpu in 0 1 2 3; do (run $gpu recipe-s$((gpu + 2)) $((gpu + 2)) $BUDGET) & done
  wait
  for name in recipe-s2 recipe-s3 recipe-s4 recipe-s5; do
    python -c "import sys, torch; print(sys.argv[1], torch.load(sys.argv[2], weights_only=True, map_location='cpu')['data'])" \
      $name $CK/$name.pt >> $W/data-identity.txt 2>&1
  done
  CUDA_VISIBLE_DEVICES=0 python -m pytest -q tests/test_gpu_loaders.py -k "prior" > $W/gpu-tests.log 2>&1
  echo "driver done at $(elapsed)s" >> $W/train.txt; touch $W/DONE
}
source results/nvidia-h100/call-lib.sh "$@"
