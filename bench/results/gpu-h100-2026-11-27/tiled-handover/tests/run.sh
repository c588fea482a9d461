#!/bin/bash
# The handover + float4 stats build: the whole of gpu_ops and gpu_resident.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/tests; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_resident; do
  s=$(date +%s)
  timeout -k 5 200 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | head
cd $OUT && tar -czf tests.tgz tests && rm -rf tests
