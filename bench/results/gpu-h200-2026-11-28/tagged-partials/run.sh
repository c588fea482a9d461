#!/bin/bash
# The tiled kernel's reduction: tagged slots and a relaxed ticket (new default) against the slots behind a release fence and an acq_rel ticket (FL_TILED_TICKET_FENCED), interleaved in one build; GPU tests with the new default.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/tagged; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
OLD="FL_TILED_TICKET_FENCED"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test streaming gpu_streaming "" ""
run_test resident gpu_resident "" ""
run_test stream_watch gpu_stream_watch "" ""
run_test reload gpu_reload "" ""
run_test ops-tiled gpu_ops tiled ""
cmp() { # name bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$4" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes $2 $3 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, (streamed, )?tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-new-$round 786432 "$IMG" ""
  cmp 768k-old-$round 786432 "$IMG" "$OLD"
done
cmp 2m-new 2097158 "" ""
cmp 2m-old 2097158 "" "$OLD"
for v in new old; do
  d=""; [ $v = old ] && d="$OLD"
  FRAMELOOP_NVRTC_DEFINES="$d" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$v.txt 2>&1
  echo "8k $v rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k-$v.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
done
cmp 768k-new-phases 786432 "$IMG" "FL_TILED_PHASES"
cmp 768k-old-phases 786432 "$IMG" "FL_TILED_PHASES $OLD"
for f in new old; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for v in new old new old new old new old; do
  left=$((560 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  n=1; while [ -d $R/wire-$v-$n ]; do n=$((n + 1)); done
  d=$R/wire-$v-$n
  defs=""; [ $v = old ] && defs="$OLD"
  FRAMELOOP_NVRTC_DEFINES="$defs" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v-$n $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cp $R/summary.txt $OUT/
cd /tmp && tar -czf $OUT/tagged.tgz tagged
