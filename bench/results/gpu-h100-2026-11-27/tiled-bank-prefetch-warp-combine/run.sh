#!/bin/bash
# The tiled loop kernel with (a) the steps of the bank in use copied while its blocks wait for a frame (binary `frameloop` against `frameloop-base`, 42a2bba) and (b) FL_TILED_WARP_COMBINE (the last block's combine by one warp): GPU tests with both, then interleaved comparisons, phases and the wire.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/prefetch-warp; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
W=FL_TILED_WARP_COMBINE
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test reload-W gpu_reload "" "$W"
run_test resident-W gpu_resident "" "$W"
run_test streaming-W gpu_streaming "" "$W"
run_test stream_watch-W gpu_stream_watch "" "$W"
run_test ops-tiled-W gpu_ops tiled "$W"
cmp() { # name binary part bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$6" timeout 60 $B/$2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, (streamed, )?tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-base-$round frameloop-base 8924 786432 "$IMG" ""
  cmp 768k-new-$round frameloop 8924 786432 "$IMG" ""
  cmp 768k-newW-$round frameloop 8924 786432 "$IMG" "$W"
done
for round in 1 2; do
  cmp 2m-base-$round frameloop-base 8924 2097158 "" ""
  cmp 2m-newW-$round frameloop 8924 2097158 "" "$W"
done
cmp 768k-base-phases frameloop-base 8924 786432 "$IMG" "FL_TILED_PHASES"
cmp 768k-newW-phases frameloop 8924 786432 "$IMG" "FL_TILED_PHASES $W"
for f in base newW; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for v in base newW base2 newW2; do
  left=$((560 - ($(date +%s) - T0)))
  [ $left -lt 55 ] && break
  d=$R/wire-$v
  defs=""; bin=$B/frameloop-base
  case $v in newW*) defs="$W"; bin=$B/frameloop;; esac
  FRAMELOOP_NVRTC_DEFINES="$defs" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf prefetch-warp.tgz prefetch-warp && rm -rf prefetch-warp
