#!/bin/bash
# Does the clock recalibration (a one-thread probe kernel launched beside the resident loop once a
# second, resident for its 200 round trips) put the tail into the wire figure? The same binary
# with recalibration as usual and with it turned off (FL_EXPERIMENT_NO_RECAL, an experiment-only
# switch of this build), rounds alternating; 8 KiB and streamed 768 KiB. First, the tiled kernel's
# plan (blocks per SM) from a trace-level log.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fn && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fn
B=/tmp/fn/bin/frameloop
R=/tmp/recal; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
OUT=$R/plan CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP_LOG="info,frameloop::gpu=trace" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
grep -E "blocks per SM|tile|grid" $R/plan/image-768k-on/run.txt | grep -v "^ " | cut -c1-300 | head -20 > $R/plan.txt
line() { grep -E "^(last_rx_to_seen|done_to_seen|publish_to_detect|compute) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
for round in $(seq 1 30); do
  left=$((420 - ($(date +%s) - T0)))
  [ $left -lt 30 ] && break
  if [ $((round % 2)) = 1 ]; then order="on off"; else order="off on"; fi
  for recal in $order; do
    d=$R/r$round-$recal
    if [ $recal = off ]; then
      FL_EXPERIMENT_NO_RECAL=1 OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    else
      OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    fi
    for c in small-8k image-768k-on; do
      echo "wire $round recal-$recal $c $(line $d $c)" | tee -a $R/summary.txt
    done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $R/plan.txt $OUT/
cd /tmp && tar -cJf $OUT/recal.tar.xz recal
