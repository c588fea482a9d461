#!/bin/bash
# 8 KiB frames, five comparisons in a row on one H100 (the fused one-block chain's p50 against 10 µs).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/bench-8k-rounds; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for n in 1 2 3 4 5; do
  timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$n.txt 2>&1
  echo "8k-$n rc=$? $(grep -E '^resident poll budget, fused chain' $R/8k-$n.txt)" | tee -a $R/summary.txt
done
cd $OUT && tar -czf bench-8k-rounds.tgz bench-8k-rounds && rm -rf bench-8k-rounds
