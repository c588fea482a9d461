#!/bin/bash
# Tiled kernel: claim handed over in one tagged 16-byte release; stats read as float4s. Tests, GPU time and phases against cf8a65e, wire.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/first; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
s=$(date +%s); timeout -k 5 130 $B/gpu_ops --include-ignored --test-threads=1 tiled > $R/gpu_ops.txt 2>&1; echo "gpu_ops tiled rc=$? $(( $(date +%s) - s ))s $(grep -E '^test result' $R/gpu_ops.txt | tail -1)" | tee -a $R/summary.txt
for t in gpu_stream_watch gpu_streaming gpu_resident gpu_reload gpu_fault_fused; do
  s=$(date +%s)
  timeout -k 5 60 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
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
cmp 2m-new-phases $B/frameloop 8924 2097152 "" FL_TILED_PHASES
for f in 768k-new 2m-new; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
d=$R/wire-new
OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 150 bash bench/streaming/run.sh > /dev/null 2>&1
for c in small-8k image-768k-on; do
  echo "wire new $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf first.tgz first && rm -rf first
