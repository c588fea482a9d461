#!/bin/bash
# Tiled claim handed over in one tagged 16-byte release (with float4 stats) against float4 stats alone, interleaved; wire for both.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop-handover target/release/frameloop
R=$OUT/interleaved; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_loops gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 100 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cmp() { # name binary part bytes config [defines]
  FRAMELOOP_NVRTC_DEFINES="${6:-}" timeout 60 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2 3; do
  cmp 768k-handover-$round $B/frameloop-handover 8924 786432 "$IMG"
  cmp 768k-stats-$round $B/frameloop-stats 8924 786432 "$IMG"
done
cmp 768k-handover-phases $B/frameloop-handover 8924 786432 "$IMG" FL_TILED_PHASES
cmp 768k-stats-phases $B/frameloop-stats 8924 786432 "$IMG" FL_TILED_PHASES
for f in handover stats; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for v in handover stats; do
  left=$((330 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  d=$R/wire-$v
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop-$v timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf interleaved.tgz interleaved && rm -rf interleaved
