#!/bin/bash
# loop.pull_end_guard_bytes: the streaming GPU tests (the claiming kernel with and without it), and wire to result with and without it from the config.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r60; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
for t in gpu_resident gpu_streaming gpu_stream_watch gpu_wire gpu_kernels_compile; do
  timeout -k 5 100 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
for g in 0 65536; do
  d=$R/wire-guard$g
  OUT=$d CASES="image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" LOOP_EXTRA="pull_end_guard_bytes = $g" FRAMELOOP=$B/frameloop timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  for c in image-768k-on default-2m-on; do
    echo "guard $g $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r60.tgz r60 && rm -rf r60
