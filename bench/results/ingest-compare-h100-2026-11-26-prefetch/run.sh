#!/bin/bash
# Ingest against spead2 on the GPU machine, CUDA backend: the build before the prefetch change and after, interleaved.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r16; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
(lscpu | head -20; nproc) > $R/machine.txt 2>&1
timeout 550 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop --frameloop-base $B/frameloop-base \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 1472,8972 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$?"
tail -9 $R/compare.txt
cd $OUT && tar -czf r16.tgz r16 && rm -rf r16
