#!/bin/bash
# One place left free beside the tiled kernel (the clock probe no longer holds the loop's next
# launch): the tiled kernels' GPU tests with the change, the streamed 768 KiB comparison and the
# 8 KiB bench, then wire rounds with and without the free place in one experiment build
# (FL_EXPERIMENT_ALL_PLACES=1: every place to the tiles, as before), with the claim-gap marks and
# per-frame records.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl /tmp/fx && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/bin-experiment.tar.xz -C /tmp/fx
B=/tmp/fl/bin; X=/tmp/fx/bin/frameloop
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/free; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,count --format=csv; nvidia-smi -q | grep -i "multiproc" ; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_resident gpu_streaming gpu_reload gpu_wire gpu_loops; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
  grep -E "^test .*FAILED|panicked" $R/$t.txt | head -5 | tee -a $R/summary.txt
done
FRAMELOOP_LOG="info,frameloop::gpu=debug" timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 3000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/compare-768k-free.txt 2>&1
echo "compare-768k-free rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
FL_EXPERIMENT_ALL_PLACES=1 FRAMELOOP_LOG="info,frameloop::gpu=debug" timeout 100 $X bench --backend cuda --compare --paths-only --frames 3000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/compare-768k-all.txt 2>&1
echo "compare-768k-all rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
line() { grep -E "^(last_rx_to_seen|done_to_seen|publish_to_detect|compute) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; }
for round in $(seq 1 40); do
  left=$((540 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && break
  if [ $((round % 2)) = 1 ]; then order="free all"; else order="all free"; fi
  for v in $order; do
    d=$R/r$round-$v; mkdir -p $d
    if [ $v = all ]; then export FL_EXPERIMENT_ALL_PLACES=1; else unset FL_EXPERIMENT_ALL_PLACES; fi
    FRAMELOOP_NVRTC_DEFINES=FL_EXPERIMENT_CLAIM_GAPS FL_EXPERIMENT_RECORDS=$d/rec-768k.txt OUT=$d CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    echo "wire $round $v image-768k-on $(line $d image-768k-on)" | tee -a $R/summary.txt
  done
  unset FL_EXPERIMENT_ALL_PLACES
  d=$R/r$round-8k; mkdir -p $d
  FL_EXPERIMENT_RECORDS=$d/rec-8k.txt OUT=$d CASES="small-8k" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  echo "wire $round - small-8k $(line $d small-8k)" | tee -a $R/summary.txt
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/free.tar.xz free
