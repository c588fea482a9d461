#!/bin/bash
# Where the receiving thread's time goes between the receive call that completed a 768 KiB frame and
# the frame's publication: the experiment build stamps the thread's CPU time at each receive call
# and at publication (first_rx_ns of the records), the wall time at publication (sender_ts_ns), and
# /proc/stat (steal) is read around each case. Free place kept (the committed tiled kernel).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fx && tar -xJf $BUNDLE/bin-experiment.tar.xz -C /tmp/fx
X=/tmp/fx/bin/frameloop
R=/tmp/cpu; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; lscpu; cat /proc/cmdline; } > $R/machine.txt 2>&1
line() { grep -E "^(last_rx_to_seen|done_to_seen|publish_to_detect|compute) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
for round in $(seq 1 40); do
  left=$((290 - ($(date +%s) - T0)))
  [ $left -lt 20 ] && break
  if [ $((round % 2)) = 1 ]; then mode=free; else mode=pinned; fi
  if [ $mode = pinned ]; then export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4; else unset SERVICE_EXTRA SEND_CPUS; fi
  d=$R/r$round-$mode; mkdir -p $d
  grep '^cpu' /proc/stat > $d/stat-before.txt
  FRAMELOOP_NVRTC_DEFINES=FL_EXPERIMENT_CLAIM_GAPS FL_EXPERIMENT_RECORDS=$d/rec-768k.txt OUT=$d CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  grep '^cpu' /proc/stat > $d/stat-after.txt
  echo "wire $round $mode image-768k-on $(line $d image-768k-on)" | tee -a $R/summary.txt
  if [ $((round % 3)) = 0 ]; then
    FL_EXPERIMENT_RECORDS=$d/rec-8k.txt OUT=$d CASES="small-8k" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    echo "wire $round $mode small-8k $(line $d small-8k)" | tee -a $R/summary.txt
  fi
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/cpu.tar.xz cpu
