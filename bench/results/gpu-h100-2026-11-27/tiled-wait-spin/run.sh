#!/bin/bash
# The tiled loop kernel's waits without sleeping between looks: FL_TILED_SPIN_NS=0 (the blocks' wait for the claim) and FL_TILED_PULL_SPIN_NS=0 (a tile's wait for the puller), against the defaults (20 and 32 ns), interleaved in one build; GPU tests with both at 0.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/spin; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
S="FL_TILED_SPIN_NS=0"
SP="FL_TILED_SPIN_NS=0 FL_TILED_PULL_SPIN_NS=0"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test streaming-SP gpu_streaming "" "$SP"
run_test resident-SP gpu_resident "" "$SP"
run_test stream_watch-SP gpu_stream_watch "" "$SP"
run_test reload-SP gpu_reload "" "$SP"
run_test ops-tiled-SP gpu_ops tiled "$SP"
cmp() { # name bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$4" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes $2 $3 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, (streamed, )?tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-base-$round 786432 "$IMG" ""
  cmp 768k-S-$round 786432 "$IMG" "$S"
  cmp 768k-SP-$round 786432 "$IMG" "$SP"
done
cmp 2m-base 2097158 "" ""
cmp 2m-SP 2097158 "" "$SP"
cmp 768k-base-phases 786432 "$IMG" "FL_TILED_PHASES"
cmp 768k-SP-phases 786432 "$IMG" "FL_TILED_PHASES $SP"
for f in base SP; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for v in base SP base SP base SP; do
  left=$((560 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  n=1; while [ -d $R/wire-$v-$n ]; do n=$((n + 1)); done
  d=$R/wire-$v-$n
  defs=""; [ $v = SP ] && defs="$SP"
  FRAMELOOP_NVRTC_DEFINES="$defs" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v-$n $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf spin.tgz spin && rm -rf spin
