#!/bin/bash
# Final build: the 8 KiB loopback bench (the result thread woken by frame publication), and ingest
# against spead2 on this host (CUDA backend), interleaved.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r34; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
(nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name") > $R/machine.txt
timeout 60 target/release/frameloop bench --backend cuda --frame-bytes 8192 --rate 1000 --duration 5 > $R/loopback-8k.txt 2>&1; echo "loopback rc=$? $(grep -E '^(end_to_end|done_to_seen)' $R/loopback-8k.txt | tr -s ' ' | cut -d' ' -f1-6 | tr '\n' ' ')"
timeout 60 target/release/frameloop bench --backend cuda --frame-bytes 8192 --rate 200 --duration 5 > $R/loopback-8k-200.txt 2>&1; echo "loopback 200/s rc=$? $(grep -E '^(end_to_end|done_to_seen)' $R/loopback-8k-200.txt | tr -s ' ' | cut -d' ' -f1-6 | tr '\n' ' ')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
timeout 250 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-cuda --sizes 1472,8972 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$?"; grep -E "^(spead2|frameloop)" $R/compare.txt | tail -6
cd $OUT && tar -czf r34.tgz r34 && rm -rf r34
