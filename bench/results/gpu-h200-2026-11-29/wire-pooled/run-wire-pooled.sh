#!/bin/bash
# Rounds of the wire script at every streamed size (8 KiB, streamed 768 KiB, 2 MiB and 8 MiB; every
# 8,972-byte datagram paced at 12 Gb/s without GSO, receiver busy-polling, threads and sender pinned),
# each case sending twice its frames (FRAMES_SCALE=2), then the wire target over all rounds' frames
# (bench/streaming/pooled.py).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/wirepooled; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -E "Model name|NUMA|Thread|Hypervisor|L2|L3";
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; } > $R/machine.txt 2>&1
cat $R/machine.txt
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
CASES="small-8k image-768k-on default-2m-on default-8m-on"
line() { grep -E "^last_rx_to_seen " $1/$2/run.txt | head -1 | awk '{printf "p50 %s p99.9 %s", $2, $5}'; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-545} - ($(date +%s) - T0)))
  [ $left -lt 60 ] && break
  d=$R/r$round; mkdir -p $d
  CPU_STATS=1 FRAME_LOG=1 FRAMES_SCALE=2 OUT=$d CASES="$CASES" LINK_GBPS=12 SEND_EXTRA="--gso off" \
    INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 100 bash bench/streaming/run.sh > $d/script.txt 2>&1
  for c in $CASES; do echo "wire $round $c $(line $d $c) $(grep -m1 "^$c" $d/summary.txt | sed 's/.*| *//')" | tee -a $R/summary.txt; done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 bench/streaming/pooled.py $R/8k.txt $R > $R/pooled.txt 2>&1; cat $R/pooled.txt
cd /tmp && for f in $(find wirepooled -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
cp $R/summary.txt $R/pooled.txt $R/machine.txt $R/8k.txt $OUT/
XZ_OPT=-T0 tar -cJf $OUT/wire-slim.tar.xz --exclude frames.csv wirepooled
find wirepooled -name frames.csv | XZ_OPT=-T0 tar -cJf $OUT/wire-frames.tar.xz -T -
ls -la $OUT
