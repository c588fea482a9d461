#!/bin/bash
# Tagged partials with an acquire-only ticket (FL_TILED_TAGGED_TICKET) against the build without, interleaved.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/tiled-tagged-ticket; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
ALL="FL_TILED_TAGGED_TICKET"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}

run_test streaming-all gpu_streaming "" "$ALL"
run_test ops-tiled-all gpu_ops tiled "$ALL"
run_test resident-all gpu_resident "" "$ALL"
run_test stream_watch-all gpu_stream_watch "" "$ALL"
cmp() { # name part bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$5" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $2 --frame-bytes $3 $4 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2 3; do
  cmp 768k-base-$round 8924 786432 "$IMG" ""
  cmp 768k-tagged-$round 8924 786432 "$IMG" "$ALL"
done
cmp 2m-base 8924 2097152 "" ""
cmp 2m-tagged 8924 2097152 "" "$ALL"
cmp 768k-base-phases 8924 786432 "$IMG" "FL_TILED_PHASES"
cmp 768k-tagged-phases 8924 786432 "$IMG" "FL_TILED_PHASES $ALL"
for f in base tagged; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf tiled-tagged-ticket.tgz tiled-tagged-ticket && rm -rf tiled-tagged-ticket
