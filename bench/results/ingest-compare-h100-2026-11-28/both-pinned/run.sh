#!/bin/bash
# The comparison's ladder on the CUDA backend, current build (one call per landed run), its receiving, result and loop threads pinned apart, against spead2_recv pinned to two of the same CPUs; catch-up 1.05.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/run; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|thread|numa'; } > $R/machine.txt 2>&1
s=$(date +%s)
timeout 540 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus 3,7 --frameloop $B/frameloop --frameloop-catch-up 1.05 --frameloop-config-extra '[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11' --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 8972,1472 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -8 $R/compare.stdout >> $R/summary.txt
cp $R/summary.txt $OUT/
xz -9 $R/compare.txt
tar -cf $OUT/r41.tar -C /tmp r41
