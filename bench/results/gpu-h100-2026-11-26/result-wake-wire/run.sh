#!/bin/bash
# The result thread sleeping on the frame ring (CUDA backend): the appliance-level GPU tests, then
# wire to result over loopback UDP (bench/streaming/run.sh), epoll and busy-polling receiver.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r33; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for t in gpu_wire gpu_streaming gpu_loops gpu_output gpu_resident; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
fl=target/release/frameloop
OUT=$R/wire FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > $R/wire.log 2>&1; echo "wire rc=$?"; cat $R/wire/summary.txt
OUT=$R/wire-busy INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > $R/wire-busy.log 2>&1; echo "wire-busy rc=$?"; cat $R/wire-busy/summary.txt
for c in small-8k image-768k-on default-2m-on default-8m-on; do echo "-- $c"; grep -E "^(publish_to_detect|done_to_seen)" $R/wire-busy/$c/run.txt | sort -u | cut -c1-90; done
cd $OUT && tar -czf r33.tgz r33 && rm -rf r33
