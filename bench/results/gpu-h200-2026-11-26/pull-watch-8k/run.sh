#!/bin/bash
# 8 KiB frames before / after the pull watch: bench --compare and the loopback bench, alternating, twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r44; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for round in 1 2; do
  for v in base watch; do
    timeout 120 $B/frameloop-$v bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/compare-$v-$round.txt 2>&1; echo "compare $v $round rc=$?"
    timeout 60 $B/frameloop-$v bench --backend cuda --frame-bytes 8192 --rate 1000 --duration 5 > $R/loopback-$v-$round.txt 2>&1; echo "loopback $v $round rc=$?"
  done
done
for f in $R/compare-*.txt; do echo "== $(basename $f)"; grep -E "^resident|^graph-launch|8 KiB|small" $f | cut -c1-150 | head -8; done
for f in $R/loopback-*.txt; do echo "== $(basename $f)"; grep -E "end_to_end|done_to_seen" $f | head -3; done
cd $OUT && tar -czf r44.tgz r44 && rm -rf r44
