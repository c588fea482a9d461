#!/bin/bash
# The slot-line prefetch with intent to write (prefetchw) against the read prefetch (base), CUDA backend, against spead2; both senders at catch-up 1.05.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r31; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; } > $R/machine.txt 2>&1
s=$(date +%s)
timeout 580 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --frameloop-base $B/frameloop-base --frameloop-base-catch-up 1.05 --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -8 $R/compare.stdout >> $R/summary.txt
