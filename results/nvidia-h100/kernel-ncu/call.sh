#!/usr/bin/env bash
# ncu on the triton kernels (one launch each, the third iteration), clocks left alone.
set -u
export PYTHONUNBUFFERED=1
D=results/nvidia-h100/kernel-ncu
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee $OUT/gpu.txt
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section SchedulerStats --section InstructionStats"
for mode in shared split; do
  timeout 240 ncu --clock-control none $S --kernel-name regex:'_(fwd|bwd)_kernel' --launch-skip 4 --launch-count 3 \
    --metrics sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__pipe_shared_cycles_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread \
    python $D/prof.py $mode > $OUT/ncu-$mode.txt 2>&1
  echo "$mode exit $?"
done
grep -E "^\s+(_fwd|_bwd)|Duration|Registers Per|Achieved Occupancy|Theoretical Occupancy|Compute \(SM\) Throughput|Memory Throughput|pipe_xu|hmma|pipe_fma|pipe_alu|pipe_shared|Issue Slots Busy|No Eligible|Block Limit Registers|Block Limit Shared|Grid Size|Stall" $OUT/ncu-*.txt | head -120
