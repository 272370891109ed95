#!/usr/bin/env bash
# One call on two H100s of one machine (NCCL_NVLS_ENABLE=0).
# #35: upstream's shape (nano 20k dump) --fast on one GPU, then under torchrun on two (each its own fresh Inductor
#      cache), then tests/test_ddp.py's CUDA case (graphed DDP step = one process on the doubled batch).
# #34: --recipe real-tables, one seed per GPU, $BUDGET s of training, the model kept at 60 and 180 s too; each scored
#      on the real suite (binary tasks, 2 splits) on its GPU; slim checkpoints come back for quality.py on the CPU.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
BUDGET=${BUDGET:-300}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
export PYTHONPATH=/tmp/site
W=/tmp/w; mkdir -p $W /tmp/ck /tmp/d data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt
CUDA_VISIBLE_DEVICES=1 python -c "
import prior_dump, train_optimized as t
prior_dump.ensure_default_dump(preset='real', num_datasets=t.RECIPE_DUMP_DATASETS['cuda'], device='cuda')" \
  > $W/dump-real.log 2>&1 &
CUDA_VISIBLE_DEVICES=0 python prior_dump.py --preset nano --num-datasets 20000 --out /tmp/d/nano20k.h5 --device cuda \
  --no-progress > $W/dump-nano.log 2>&1
up="train_optimized.py --data /tmp/d/nano20k.h5 --fast --steps 3000 --timing-warmup 1000 --no-eval --log-every 1000"
CUDA_VISIBLE_DEVICES=0 TORCHINDUCTOR_CACHE_DIR=/tmp/ind-one timeout 120 python $up --record $W/up-1gpu.json \
  > $W/up-1gpu.log 2>&1; echo "1 GPU exit $? at ${SECONDS}s: $(grep done: $W/up-1gpu.log | cut -c1-200)"
wait; echo "dumps at ${SECONDS}s"; tail -n 1 $W/dump-real.log
TORCHINDUCTOR_CACHE_DIR=/tmp/ind-two timeout 150 torchrun --standalone --nproc_per_node 2 $up --record $W/up-2gpu.json \
  > $W/up-2gpu.log 2>&1; echo "2 GPUs exit $? at ${SECONDS}s: $(grep done: $W/up-2gpu.log | cut -c1-200)"
grep -h "cuda-graphs\|--attention" $W/up-2gpu.log | head -3
timeout 100 python -m pytest -q -p no:cacheprovider tests/test_ddp.py > $W/ddp-test.log 2>&1
echo "ddp test exit $? at ${SECONDS}s"; tail -n 1 $W/ddp-test.log
for s in 0 1; do
  (CUDA_VISIBLE_DEVICES=$s TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$s timeout $((505 - SECONDS)) python train_optimized.py \
    --recipe real-tables --seed $s --time-budget $BUDGET --save-at 60,180 --no-eval --log-every 200 \
    --ckpt /tmp/ck/s$s.pt --record $W/s$s.json > $W/s$s.log 2>&1
   echo "seed $s exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/s$s.log | tail -1 | cut -c1-230)"
   CUDA_VISIBLE_DEVICES=$s python results/nvidia-h100/real-select/score.py $W/score-s$s.json 2 s$s-60s=/tmp/ck/s$s-60s.pt \
     s$s-180s=/tmp/ck/s$s-180s.pt s$s-${BUDGET}s=/tmp/ck/s$s.pt > $W/score-s$s.log 2>&1) &
done
wait
cat $W/score-s*.log
python - <<'PY'   # slim checkpoints (inference weights and meta only) for the trip back
import glob, os, torch
for path in glob.glob("/tmp/ck/*.pt"):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state.pop("train_state", None)
    torch.save(state, os.path.join("/tmp/w", "slim-" + os.path.basename(path)))
PY
tar czf $OUT/real-curve.tgz -C $W .
