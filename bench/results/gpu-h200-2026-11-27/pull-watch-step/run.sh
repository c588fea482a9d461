#!/bin/bash
# How far the received mark must pass the pulled length before the poll ends for a pull (FL_PULL_WATCH_BYTES): wire to result, every datagram paced at 25 Gb/s, and bench --compare.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r58; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
OUT=$R/wire-8k CASES="small-8k" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
grep small $R/wire-8k/summary.txt | cut -c1-100
for round in 1 2; do
  for step in 16 32768 65536; do
    export FRAMELOOP_NVRTC_DEFINES="FL_PULL_WATCH_BYTES=$step"
    d=$R/wire-step$step-$round
    OUT=$d CASES="image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    for c in image-768k-on default-2m-on; do
      echo "step $step round $round $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
    done
  done
done
for step in 16 32768; do
  export FRAMELOOP_NVRTC_DEFINES="FL_PULL_WATCH_BYTES=$step"
  timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-d-step$step.txt 2>&1
  echo "compare step $step rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/768k-d-step$step.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}')" | tee -a $R/summary.txt
done
cd $OUT && tar -czf r58.tgz r58 && rm -rf r58
