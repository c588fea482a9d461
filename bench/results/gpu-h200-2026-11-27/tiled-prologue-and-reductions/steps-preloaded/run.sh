#!/bin/bash
# Claiming tiled kernel: steps copied into shared memory while block 0 polls, a shorter spin, finer phase marks. Tests, phases, new against the puller build alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r62; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
for t in gpu_stream_watch gpu_resident gpu_streaming gpu_loops gpu_fault gpu_reload; do
  timeout -k 5 120 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cmp() { # name binary part bytes config [defines]
  FRAMELOOP_NVRTC_DEFINES="${6:-}" timeout 100 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
cmp 768k-d-new-phases $B/frameloop 8924 786432 "$IMG" FL_TILED_PHASES
cmp 2m-d-new-phases $B/frameloop 8924 2097152 "" FL_TILED_PHASES
grep -h "phases of resident poll, streamed, tiled" $R/*-phases.txt | tee -a $R/summary.txt
for round in 1 2; do
  cmp 768k-d-new-$round $B/frameloop 8924 786432 "$IMG"
  cmp 768k-d-base-$round $B/frameloop-base 8924 786432 "$IMG"
done
for v in new base; do
  bin=$B/frameloop; [ $v = base ] && bin=$B/frameloop-base
  d=$R/wire-$v
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "$v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r62.tgz r62 && rm -rf r62
