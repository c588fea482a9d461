#!/bin/bash
# The kept build: the 8 KiB fused chain three times, then wire rounds (8 KiB and 768 KiB image frames streamed, alternating) for the rest of the call.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/confirm; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for n in 1 2 3; do
  timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$n.txt 2>&1
  echo "8k $n rc=$? $(grep -E '^resident poll budget, fused chain' $R/8k-$n.txt | awk '{print $(NF-8), "gpu", $(NF-1)}')" | tee -a $R/summary.txt
done
for n in 1 2 3 4 5 6 7 8 9 10 11 12; do
  left=$((440 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  d=$R/wire-$n
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $n $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt 2>/dev/null | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -czf $OUT/confirm.tgz confirm
