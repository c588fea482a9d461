#!/bin/bash
# Where publish_to_detect's tail at 768 KiB comes from: the claiming tiled kernel built with
# FL_EXPERIMENT_CLAIM_GAPS writes, per frame, the gap before the claiming launch, the poll time
# until the head was seen, the wait for the grid's blocks, the header read, the idle launches since
# the last frame and their largest gap, and the launch's start; FL_EXPERIMENT_RECORDS dumps every
# result record with its timestamps. Streamed 768 KiB and 8 KiB, rounds alternating free / pinned.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fn && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fn
B=/tmp/fn/bin/frameloop
R=/tmp/gaps; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; lscpu | grep -E "Model name|NUMA"; } > $R/machine.txt 2>&1
line() { grep -E "^(last_rx_to_seen|done_to_seen|publish_to_detect|compute|rx_to_publish) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
for round in $(seq 1 40); do
  left=$((330 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && break
  if [ $((round % 2)) = 1 ]; then mode=free; else mode=pinned; fi
  d=$R/r$round-$mode
  mkdir -p $d
  if [ $mode = pinned ]; then export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4; else unset SERVICE_EXTRA SEND_CPUS; fi
  FRAMELOOP_NVRTC_DEFINES=FL_EXPERIMENT_CLAIM_GAPS FL_EXPERIMENT_RECORDS=$d/rec-768k.txt OUT=$d CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  FL_EXPERIMENT_RECORDS=$d/rec-8k.txt OUT=$d CASES="small-8k" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $round $mode $c $(line $d $c)" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/gaps.tar.xz gaps
