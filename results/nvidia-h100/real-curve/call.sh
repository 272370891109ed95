#!/usr/bin/env bash
# #34 time-to-quality on two H100s of one machine, one seed per GPU: --recipe real-tables (the prior's real preset,
# made once on GPU 0) for $BUDGET s of training, the model kept at 60 and 180 s too; each checkpoint scored on the
# real suite (data/real_suite.npz, binary tasks, 2 splits each) on the GPU; checkpoints come back for the full
# scoring (suite + held-out, multiclass) on the CPU with quality.py.
set -u
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
BUDGET=${BUDGET:-420}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl 2>&1 | grep -v WARN
export PYTHONPATH=/tmp/site
W=/tmp/w; mkdir -p $W /tmp/ck data
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $W/gpu.txt
LC_ALL=C sha256sum *.py > $W/code.txt
CUDA_VISIBLE_DEVICES=0 python -c "
import prior_dump, train_optimized as t
prior_dump.ensure_default_dump(preset='real', num_datasets=t.RECIPE_DUMP_DATASETS['cuda'], device='cuda')" \
  > $W/dump.log 2>&1; echo "dump exit $? at ${SECONDS}s"; tail -1 $W/dump.log
for s in 0 1; do
  (CUDA_VISIBLE_DEVICES=$s TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$s timeout $((570 - SECONDS)) python train_optimized.py \
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
