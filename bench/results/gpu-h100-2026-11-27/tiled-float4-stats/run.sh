#!/bin/bash
# Tiled kernel: stats read as float4s. Every GPU test binary, GPU time against cf8a65e, 8 KiB bench, wire twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/final; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_stream_watch gpu_streaming gpu_resident gpu_fault_fused gpu_reload gpu_loops gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 200 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cmp() { # name binary part bytes config [defines]
  FRAMELOOP_NVRTC_DEFINES="${6:-}" timeout 60 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-new-$round $B/frameloop 8924 786432 "$IMG"
  cmp 768k-base-$round $B/frameloop-base 8924 786432 "$IMG"
done
cmp 2m-new $B/frameloop 8924 2097152 ""
cmp 2m-base $B/frameloop-base 8924 2097152 ""
cmp 768k-new-phases $B/frameloop 8924 786432 "$IMG" FL_TILED_PHASES
echo "768k-new $(grep -h "phases of resident poll, streamed, tiled" $R/768k-new-phases.txt | sed 's/.*detection)://')" | tee -a $R/summary.txt
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-new.txt 2>&1; grep -E "^resident poll budget, auto|^\[" $R/8k-new.txt | head -4 | tee -a $R/summary.txt
for run in 1 2; do
  left=$((560 - ($(date +%s) - T0)))
  [ $left -lt 60 ] && break
  d=$R/wire-$run
  OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on default-2m-on; do
    echo "wire $run $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf final.tgz final && rm -rf final
