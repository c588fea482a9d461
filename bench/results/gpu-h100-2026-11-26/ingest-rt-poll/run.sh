#!/bin/bash
# Ingest against spead2 (CUDA backend), current build: spead2, frameloop and frameloop with a SCHED_FIFO
# receiver interleaved; then spead2 and frameloop busy-polling 50 us after each datagram.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r18; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt; nproc >> $R/gpu.txt; lscpu | grep "Model name" >> $R/gpu.txt
cmp() { local name=$1; shift; timeout 260 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --sizes 1472,8972 \
  --out $R/$name.txt "$@" > $R/$name.stdout 2>&1; echo "$name rc=$?"; tail -7 $R/$name.txt | grep -E "^(spead2|frameloop)"; }
cmp compare-rt --tools spead2,frameloop-cuda,frameloop-rt-cuda
cmp compare-poll50 --tools spead2,frameloop-cuda --frameloop-ingest-extra 'poll_budget_us = 50\n'
cd $OUT && tar -czf r18.tgz r18 && rm -rf r18
