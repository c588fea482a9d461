#!/bin/bash
# Wire to result for every frame size of the large-frame work, with the committed build: the 8 KiB
# comparison (its floors give this host's device memory rate), then rounds of the whole wire script
# (8 KiB; 768 KiB image, 2 MiB and 8 MiB default chain, streamed and read in place), datagrams paced
# one by one at 25 Gb/s, receiver busy-polling, threads pinned as deployed.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin1.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/sizes; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; lscpu | grep -E "Model name|NUMA"; } > $R/machine.txt 2>&1
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^floor' $R/8k.txt | head -2 | cut -c1-300)" | tee -a $R/summary.txt
grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | tee -a $R/summary.txt
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 20); do
  left=$((540 - ($(date +%s) - T0)))
  [ $left -lt 75 ] && break
  d=$R/r$round; mkdir -p $d
  OUT=$d LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 120 bash bench/streaming/run.sh > /dev/null 2>&1
  sed "s/^/round $round /" $d/summary.txt | grep -v " case " | tee -a $R/summary.txt
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/sizes.tar.xz sizes
