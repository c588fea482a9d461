#!/bin/bash
# The stats/threshold step folded into the filter before it (FL_TILED_FOLD) against the build without, interleaved.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/tiled-fold; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
ALL="FL_TILED_FOLD"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test streaming-base gpu_streaming "" ""
run_test streaming-all gpu_streaming "" "$ALL"
run_test stream_watch-all gpu_stream_watch "" "$ALL"
run_test resident-all gpu_resident "" "$ALL"
run_test ops-tiled-all gpu_ops tiled "$ALL"
run_test ops-fir-all gpu_ops fir "$ALL"
cmp() { # name part bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$5" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $2 --frame-bytes $3 $4 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2 3; do
  cmp 768k-base-$round 8924 786432 "$IMG" ""
  cmp 768k-fold-$round 8924 786432 "$IMG" "$ALL"
done
cmp 2m-base 8924 2097152 "" ""
cmp 2m-fold 8924 2097152 "" "$ALL"
cmp 768k-base-phases 8924 786432 "$IMG" "FL_TILED_PHASES"
cmp 768k-fold-phases 8924 786432 "$IMG" "FL_TILED_PHASES $ALL"
for f in base fold; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for v in base fold; do
  left=$((540 - ($(date +%s) - T0)))
  [ $left -lt 60 ] && break
  d=$R/wire-$v
  defs=""; [ $v = fold ] && defs="$ALL"
  FRAMELOOP_NVRTC_DEFINES="$defs" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf tiled-fold.tgz tiled-fold && rm -rf tiled-fold
