#!/bin/bash
# Rounds of the wire script (8 KiB, streamed 768 KiB, streamed 2 MiB; every datagram paced at 12 Gb/s,
# no GSO: a pace the sender keeps), taking turns: B = build a76ffc8, H = build 72d2964 (the kept
# receive-call headers, one clock read a turn, the frame ring in huge pages).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/pace12; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -E "Model name|NUMA|Thread|Hypervisor|L2|L3";
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; } > $R/machine.txt 2>&1
cat $R/machine.txt
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
line() { grep -E "^(last_rx_to_seen|assembly) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s  ", $1, $2, $5}'; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-545} - ($(date +%s) - T0)))
  [ $left -lt 55 ] && break
  for v in B H; do
    d=$R/r$round-$v; mkdir -p $d
    bin=$B/frameloop; [ $v = B ] && bin=$B/frameloop-base
    CPU_STATS=1 FRAME_LOG=1 OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=12 SEND_EXTRA="--gso off" \
      INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 80 bash bench/streaming/run.sh > $d/script.txt 2>&1
    for c in small-8k image-768k-on default-2m-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt; done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 $BUNDLE/analyze.py $R/8k.txt $R > $R/analysis.txt 2>&1; head -30 $R/analysis.txt
cd /tmp && for f in $(find pace12 -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
cp $R/summary.txt $R/analysis.txt $R/machine.txt $OUT/
XZ_OPT=-T0 tar -cJf $OUT/pace12-slim.tar.xz --exclude frames.csv pace12
find pace12 -name frames.csv | XZ_OPT=-T0 tar -cJf $OUT/pace12-frames.tar.xz -T -
ls -la $OUT
