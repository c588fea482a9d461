#!/bin/bash
# Wire to result over loopback UDP with the claiming tiled kernel (bench/streaming/run.sh):
# default receiver, then the receiver busy-polling 2000 µs after each datagram.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r29; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
timeout -k 5 120 $B/gpu_resident --include-ignored --test-threads=1 > $R/gpu_resident.txt 2>&1; echo "gpu_resident rc=$? $(grep -E "^test result" $R/gpu_resident.txt | tail -1)"
fl=target/release/frameloop
OUT=$R/wire FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > $R/wire.log 2>&1; echo "wire rc=$?"; cat $R/wire/summary.txt
OUT=$R/wire-busy INGEST_EXTRA='poll_budget_us = 2000' FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > $R/wire-busy.log 2>&1; echo "wire-busy rc=$?"; cat $R/wire-busy/summary.txt
cd $OUT && tar -czf r29.tgz r29 && rm -rf r29
