#!/bin/bash
# Every GPU test binary of the final build, one after another.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r14; mkdir -p $R
for t in gpu_kernels_compile gpu_ops gpu_resident gpu_streaming gpu_reload gpu_output gpu_loops gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_wire; do
  [ -x $B/$t ] || { echo "$t missing" | tee -a $R/summary.txt; continue; }
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cd $OUT && tar -czf r14.tgz r14 && rm -rf r14
