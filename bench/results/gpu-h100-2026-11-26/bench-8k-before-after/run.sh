#!/bin/bash
# frameloop bench at 8 KiB before (frameloop-base) and after the ingest changes, alternating, same machine.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r22; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
for round in 1 2; do
  for b in frameloop-base frameloop; do
    timeout 60 $B/$b bench --backend cuda --frame-bytes 8192 --rate 1000 --duration 5 > $R/loopback-$b-$round.txt 2>&1
    echo "loopback $b $round rc=$? $(grep -E 'end_to_end|last_rx_to_seen' $R/loopback-$b-$round.txt | head -2 | tr -s ' ' | cut -c1-150 | tr '\n' ' ')"
    timeout 90 $B/$b bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/compare-$b-$round.txt 2>&1
    echo "compare $b $round rc=$? $(grep -E '^resident poll budget, auto' $R/compare-$b-$round.txt | tr -s ' ' | cut -c1-120)"
  done
done
cd $OUT && tar -czf r22.tgz r22 && rm -rf r22
