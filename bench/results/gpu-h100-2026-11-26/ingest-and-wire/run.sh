#!/bin/bash
# Ingest against spead2 (CUDA backend) with the current build, twice: the receiver waiting in epoll, and
# busy-polling 50 us after each datagram; then wire to result over loopback (bench/streaming/run.sh).
# (The busy-polling comparison did not run: its extra config lacked a line break; see ../ingest-rt-poll/.)
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r17; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt; nproc >> $R/gpu.txt
cmp() { local name=$1; shift; timeout 200 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-cuda --sizes 1472,8972 \
  --out $R/$name.txt "$@" > $R/$name.stdout 2>&1; echo "$name rc=$?"; tail -5 $R/$name.txt; }
cmp compare-epoll
cmp compare-poll50 --frameloop-ingest-extra 'poll_budget_us = 50'
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
fl=target/release/frameloop
OUT=$R/wire FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > /dev/null 2>&1; echo "wire rc=$?"; cat $R/wire/summary.txt
cd $OUT && tar -czf r17.tgz r17 && rm -rf r17
