#!/bin/bash
# The comparison's ladder on the CUDA backend with its receiving, result and loop threads pinned apart, and spead2; catch-up 1.05 for both senders.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/r40; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; } > $R/machine.txt 2>&1
s=$(date +%s)
timeout 380 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --frameloop-base $B/frameloop --frameloop-base-catch-up 1.05 --frameloop-config-extra '[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11' --frameloop-base-config-extra '' --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -8 $R/compare.stdout >> $R/summary.txt
cp $R/summary.txt $OUT/
xz -9 $R/compare.txt
tar -cf $OUT/r40.tar -C /tmp r40
