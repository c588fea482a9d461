#!/bin/bash
# Wire to result at a 25 Gb/s pace: the sender's datagrams in 64 KiB GSO messages (as before) against each datagram
# paced on its own (--gso off), alternating, twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT/r47; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for round in 1 2; do
  for v in gso nogso; do
    extra=""; [ $v = nogso ] && extra="--gso off"
    OUT=$R/link25-$v-$round LINK_GBPS=25 SEND_EXTRA="$extra" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25-$v-$round.log 2>&1
    echo "wire $v $round rc=$?"; cut -c1-100 $R/link25-$v-$round/summary.txt
    for c in image-768k-on default-2m-on default-8m-on small-8k; do echo "  $c: $(grep -m1 -E '^compute ' $R/link25-$v-$round/$c/run.txt | tr -s ' ' | cut -c1-80)"; done
  done
done
cd $OUT && tar -czf r47.tgz r47 && rm -rf r47
