#!/bin/bash
# Wire to result on loopback with the receiver's busy-poll gap counter: rounds of the 8 KiB, streamed
# 768 KiB image and streamed 2 MiB default cases, datagrams paced at 25 Gb/s, receiver busy-polling,
# threads pinned as deployed, frame logs: do the frames whose last datagram waits long before
# publication coincide with turns in which the receiver left its socket unread for over 50 µs?
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
RPS0=$(cat /sys/class/net/lo/queues/rx-0/rps_cpus)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/gaps; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -E "Model name|NUMA|Thread|Hypervisor";
  cat /sys/devices/system/clocksource/clocksource0/current_clocksource; for c in 1 2 3 4 5; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)"; done;
  echo "lo rps_cpus $(cat /sys/class/net/lo/queues/rx-0/rps_cpus)"; } > $R/machine.txt 2>&1
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
grep -E "^floor: device memory" $R/8k.txt | tee -a $R/summary.txt
line() { grep -E "^(last_rx_to_seen|publish_to_detect|compute|done_to_seen) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-330} - ($(date +%s) - T0)))
  [ $left -lt 22 ] && break
  order="A"
  for v in $order; do
    d=$R/r$round-$v; mkdir -p $d
    rps=""; [ $v = E ] && rps=1
    fifo=""; [ $v = D ] && fifo=50
    RPS_CPUS=$rps SOFTIRQ_FIFO=$fifo CPU_STATS=1 FRAME_LOG=1 OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" \
      INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 80 bash bench/streaming/run.sh > $d/script.txt 2>&1
    echo $RPS0 > /sys/class/net/lo/queues/rx-0/rps_cpus
    for c in small-8k image-768k-on default-2m-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt; done
  done
done
echo "lo rps_cpus after: $(cat /sys/class/net/lo/queues/rx-0/rps_cpus); ksoftirqd/4 $(chrt -p $(pgrep -x ksoftirqd/4) | tr '\n' ' ')" | tee -a $R/summary.txt
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 $BUNDLE/analyze.py $R/8k.txt $R > $R/analysis.txt 2>&1; cat $R/analysis.txt
cp $R/summary.txt $R/analysis.txt $R/machine.txt $R/8k.txt $OUT/
# Slim archive: each case's run.txt, config, cpu snapshots and the frame-log lines above 50 µs.
cd /tmp && for f in $(find gaps -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
find gaps -name frames.csv > /tmp/full.txt; XZ_OPT=-T0 tar -cJf $OUT/gaps-full.tar.xz -T /tmp/full.txt
XZ_OPT=-T0 tar -cJf $OUT/gaps-slim.tar.xz --exclude frames.csv gaps
ls -la $OUT
