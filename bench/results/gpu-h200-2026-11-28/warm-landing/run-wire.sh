#!/bin/bash
# Loading the next datagrams' slot places into the cache while the socket is empty (2f52133) against
# the build before (a76ffc8), on an H200 host:
# (1) the kernel's copy into cold and cached places (bench/kernel-copy/, receiver CPU 1, sender CPU 4);
# (2) the 8 KiB resident bench of both builds;
# (3) rounds of the wire script's 8 KiB, streamed 768 KiB and streamed 2 MiB cases, the builds taking
#     turns (A = before, B = after), datagrams paced at 25 Gb/s, receiver busy-polling, threads pinned.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/warm; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -E "Model name|NUMA|Thread|Hypervisor|L2|L3";
  for c in 1 2 3 4 5; do echo "cpu$c siblings $(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)"; done; } > $R/machine.txt 2>&1
sysctl -qw net.core.rmem_max=134217728
for rate in 10 25; do for m in cold warm read pf0 cold read; do taskset -c 1 $B/paced $m $rate 8972 1 4 | tee -a $R/kernel-copy.txt; done; done
for m in cold read prefetchw cold read; do taskset -c 1 $B/drain $m | tee -a $R/kernel-copy.txt; done
echo "kernel copy done $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
for v in A B; do bin=$B/frameloop; [ $v = A ] && bin=$B/frameloop-base
  timeout 60 $bin bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k-$v.txt 2>&1
  echo "8k $v rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k-$v.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
done
cp $R/8k-A.txt $R/8k.txt
line() { grep -E "^(last_rx_to_seen|publish_to_detect|compute|done_to_seen) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-545} - ($(date +%s) - T0)))
  [ $left -lt 34 ] && break
  order="A B"; [ $((round % 2)) = 0 ] && order="B A"
  for v in $order; do
    d=$R/r$round-$v; mkdir -p $d
    bin=$B/frameloop; [ $v = A ] && bin=$B/frameloop-base
    CPU_STATS=1 FRAME_LOG=1 OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" \
      INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 80 bash bench/streaming/run.sh > $d/script.txt 2>&1
    for c in small-8k image-768k-on default-2m-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt; done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 $BUNDLE/analyze.py $R/8k.txt $R > $R/analysis.txt 2>&1; head -30 $R/analysis.txt
cp $R/summary.txt $R/analysis.txt $R/machine.txt $R/kernel-copy.txt $R/8k-A.txt $R/8k-B.txt $OUT/
cd /tmp && for f in $(find warm -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
XZ_OPT=-T0 tar -cJf $OUT/warm-slim.tar.xz --exclude frames.csv warm
ls -la $OUT
