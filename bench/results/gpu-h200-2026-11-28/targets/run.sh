#!/bin/bash
# Issue targets for large frames on one host in one call, the kept kernels: the full wire run
# (every case, streaming on and off), the comparison at 768 KiB (image chain) and 2 MiB (default
# chain) with floors, the 8 KiB bench, then wire rounds of 8 KiB and streamed 768 KiB until the
# time is used.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/targets; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
OUT=$R/wire-all LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 150 bash bench/streaming/run.sh > /dev/null 2>&1
echo "wire-all rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
cat $R/wire-all/summary.txt | tee -a $R/summary.txt
timeout 100 $B/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/compare-768k.txt 2>&1
echo "compare-768k rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
timeout 100 $B/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 2097152 > $R/compare-2m.txt 2>&1
echo "compare-2m rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
for n in 1 2; do
  timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$n.txt 2>&1
  echo "8k-$n rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k-$n.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
done
for round in $(seq 1 20); do
  left=$((530 - ($(date +%s) - T0)))
  [ $left -lt 30 ] && break
  d=$R/wire-$round
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 3)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $round $c $(grep -E "^(last_rx_to_seen|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2, "p99.9", $5}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -czf $OUT/targets.tgz targets
