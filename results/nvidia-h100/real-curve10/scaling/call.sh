#!/usr/bin/env bash
# #35 on the same four-H100 machine, right after call.sh finish (whose scaling runs found no dumps: its carried data/
# had replaced the machine's). One GPU against two with --fast's defaults, each launch on a fresh Inductor cache;
# GPUs 0 and 1, the others idle. Run from the repository root; this is the command the device ran, as a script.
export PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0; W=/tmp/s2; mkdir -p $W /tmp/d
CUDA_VISIBLE_DEVICES=0 python prior_dump.py --preset blog --num-datasets 600 --out /tmp/d/blog600.h5 --device cuda \
  --no-progress > $W/dump-blog.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 python prior_dump.py --preset nano --num-datasets 20000 --out /tmp/d/nano20k.h5 --device cuda \
  --no-progress > $W/dump-nano.log 2>&1; wait
scale() { local launch=python gpus=0; [ "${4:-}" = t ] && launch="torchrun --standalone --nproc_per_node 2" && gpus=0,1
 CUDA_VISIBLE_DEVICES=$gpus TORCHINDUCTOR_CACHE_DIR=/tmp/ind-$1 timeout 200 $launch train_optimized.py --data $2 \
   --fast --steps $3 --timing-warmup $(($3/3)) --no-eval --log-every 1000 --record $W/$1.json > $W/$1.log 2>&1
 echo "$1 exit $? at ${SECONDS}s: $(grep -E 'done:|rror' $W/$1.log | tail -1 | cut -c1-220)"; tar czf $OUT/scaling2.tgz -C $W .; }
scale up-1gpu /tmp/d/nano20k.h5 3000; scale up-2gpu /tmp/d/nano20k.h5 3000 t
scale blog-1gpu /tmp/d/blog600.h5 300; scale blog-2gpu /tmp/d/blog600.h5 300 t
grep -h "cuda-graphs\|attention" $W/blog-2gpu.log | head -4
