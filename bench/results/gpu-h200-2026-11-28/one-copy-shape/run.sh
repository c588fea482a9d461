#!/bin/bash
# One-copy plans shaped after the last receive call (one datagram per receive buffer when datagrams
# arrive apart) against plans of whole GRO buffers: streamed 768 KiB frames paced at 25 Gb/s, the two
# experiment builds alternating (A: bin-a, B: bin-b = A + the shaped plans), threads pinned and
# free in turn, with per-frame records (publication's wall time, the receiving thread's CPU time).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fa /tmp/fb && tar -xJf $BUNDLE/bin-a.tar.xz -C /tmp/fa && tar -xJf $BUNDLE/bin-b.tar.xz -C /tmp/fb
R=/tmp/shape; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
line() { grep -E "^(last_rx_to_seen|publish_to_detect|compute|assembly) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; grep -E "^ +(datagrams|placed_by_kernel) " $1/$2/run.txt | head -2 | awk '{printf "%s %s  ", $1, $2}'; }
for round in $(seq 1 40); do
  left=$((300 - ($(date +%s) - T0)))
  [ $left -lt 20 ] && break
  if [ $((round % 2)) = 1 ]; then order="A B"; export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4; mode=pinned; else order="B A"; unset SERVICE_EXTRA SEND_CPUS; mode=free; fi
  for v in $order; do
    if [ $v = A ]; then X=/tmp/fa/bin/frameloop; else X=/tmp/fb/bin/frameloop; fi
    d=$R/r$round-$v-$mode; mkdir -p $d
    FRAMELOOP_NVRTC_DEFINES=FL_EXPERIMENT_CLAIM_GAPS FL_EXPERIMENT_RECORDS=$d/rec-768k.txt OUT=$d CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    echo "wire $round $v-$mode image-768k-on $(line $d image-768k-on)" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/shape.tar.xz shape
