#!/bin/bash
# Large frames over the wire with the committed receiver (one-copy plans shaped after the last
# receive call, the frame log): the UDP-to-GPU tests, the 8 KiB bench, then wire rounds of the
# streamed 768 KiB case and the 8 KiB case, paced datagrams at 25 Gb/s, threads pinned as deployed,
# each round once with the default receiving thread (A) and once under SCHED_FIFO (B,
# ingest.realtime_priority = 50), order alternating, every frame in a frame log.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/wire15; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; lscpu | grep -E "Model name|NUMA"; } > $R/machine.txt 2>&1
for t in gpu_wire gpu_streaming gpu_loops; do
  s=$(date +%s)
  timeout -k 5 100 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
  grep -E "^test .*FAILED|panicked" $R/$t.txt | head -5 | tee -a $R/summary.txt
done
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
line() { grep -E "^(last_rx_to_seen|publish_to_detect|compute|done_to_seen) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; grep -E "^ +(placed_by_kernel) |^frame log" $1/$2/run.txt | head -2 | tr -s ' ' | tr '\n' ' '; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((520 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for v in $order; do
    extra="poll_budget_us = 2000"; [ $v = B ] && extra="poll_budget_us = 2000
realtime_priority = 50"
    d=$R/r$round-$v; mkdir -p $d
    FRAME_LOG=1 OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="$extra" FRAMELOOP=$B/frameloop timeout 80 bash bench/streaming/run.sh > /dev/null 2>&1
    for c in small-8k image-768k-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt; done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/wire15.tar.xz wire15
