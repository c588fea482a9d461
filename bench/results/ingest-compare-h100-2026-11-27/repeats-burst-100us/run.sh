#!/bin/bash
# UDP ingest against spead2 on the GPU machine with three trials per offered rate (clean by majority).
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
mkdir -p target/release && cp /tmp/fl/bin/frameloop target/release/frameloop
R=$OUT/r26; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $R/machine.txt 2>&1
timeout 560 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 8972,1472 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
tail -6 $R/compare.txt | tee -a $R/summary.txt
grep "trials clean" $R/compare.txt | tee -a $R/summary.txt
cd $OUT && tar -czf r26.tgz r26 && rm -rf r26
