#!/bin/bash
# Final build, ingest against spead2 once more: plain receiver and SCHED_FIFO receiver, interleaved.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r24; mkdir -p $R
(nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name") > $R/machine.txt 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
timeout 280 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-cuda,frameloop-rt-cuda --sizes 1472,8972 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$?"; grep -E "^(spead2|frameloop)" $R/compare.txt | tail -6
cd $OUT && tar -czf r24.tgz r24 && rm -rf r24
