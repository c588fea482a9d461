#!/usr/bin/env bash
set -u
mkdir -p /tmp/d && tar -xJf "$BUNDLE" -C /tmp/d
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
R=$OUT/uk; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/device.txt 2>&1
for t in gpu_reload gpu_user_kernels; do
  s=$(date +%s)
  timeout -k 5 150 /tmp/d/$t --include-ignored --test-threads=1 --nocapture > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "^test |bank switches|relaunches|panicked|generation 11|generation 22" $R/gpu_reload.txt | cut -c1-300 | head -30
cd $OUT && tar -czf uk.tgz uk && rm -rf uk
