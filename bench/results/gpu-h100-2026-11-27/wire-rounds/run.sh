#!/bin/bash
# Wire to result over loopback, repeated: 8 KiB and 768 KiB streamed in four rounds, then 2 MiB and 8 MiB streamed once, with the build of 42a2bba.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/wire-rounds; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
round() { # name cases
  left=$((570 - ($(date +%s) - T0)))
  [ $left -lt 60 ] && { echo "$1 not run (time)" | tee -a $R/summary.txt; return; }
  d=$R/$1
  OUT=$d CASES="$2" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in $2; do
    echo "$1 $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, "p50", $2, "p99.9", $5}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
  echo "  $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
}
for r in 1 2 3 4; do round round$r "small-8k image-768k-on"; done
round large "small-8k default-2m-on default-8m-on"
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cd $OUT && tar -czf wire-rounds.tgz wire-rounds && rm -rf wire-rounds
