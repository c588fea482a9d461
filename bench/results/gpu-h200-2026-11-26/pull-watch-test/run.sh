#!/bin/bash
# The pull-watch test, with the watch and with it compiled out (fl_pull_watch returning no watch), twice each.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r48; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for round in 1 2; do
  for v in gpu_stream_watch gpu_stream_watch-nowatch; do
    timeout 120 $B/$v --include-ignored --test-threads=1 > $R/$v-$round.txt 2>&1; echo "$v $round rc=$?"
    grep -E "frames pulled whole|test result|panicked" $R/$v-$round.txt | cut -c1-150
  done
done
cd $OUT && tar -czf r48.tgz r48 && rm -rf r48
