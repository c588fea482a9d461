#!/bin/bash
# UDP ingest against spead2 on the GPU machine with three trials per offered rate (clean by majority): the sender catching up in bursts of up to 250 µs (frameloop) against 100 µs (frameloop-base, the build before).
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
mkdir -p target/release && cp /tmp/fl/bin/frameloop /tmp/fl/bin/frameloop-base target/release/
R=$OUT/r27; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $R/machine.txt 2>&1
timeout 575 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --frameloop-base target/release/frameloop-base --frameloop-base-pacing sleep \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 8972,1472 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
tail -8 $R/compare.txt | tee -a $R/summary.txt
grep "trials clean" $R/compare.txt | tee -a $R/summary.txt
cd $OUT && tar -czf r27.tgz r27 && rm -rf r27
