#!/bin/bash
# The UDP-to-GPU tests of the current build (9844685: the receive path of a76ffc8) on an H200 host.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/tests; rm -rf $R; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/machine.txt 2>&1
for t in gpu_wire gpu_streaming gpu_resident gpu_loops; do
  left=$((270 - ($(date +%s) - T0))); [ $left -lt 20 ] && { echo "$t not run (time)" | tee -a $R/summary.txt; continue; }
  s=$(date +%s)
  timeout -k 5 $left $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
  grep -E "^test .*FAILED|panicked" $R/$t.txt | head -5 | tee -a $R/summary.txt
done
cp $R/*.txt $OUT/
