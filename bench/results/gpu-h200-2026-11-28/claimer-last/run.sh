#!/bin/bash
# The claiming tiled kernel: the block of the frame's last tile claims (FL_TILED_CLAIMER_LAST), the
# ring's claimed_seq stored after the handover (FL_TILED_CLAIMED_LATE), the blocks' wait without sleep
# (FL_TILED_SPIN_NS=0), against the current kernel, interleaved in one build.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=/tmp/claimer; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
declare -A D=( [base]="" [last]="FL_TILED_CLAIMER_LAST" [late]="FL_TILED_CLAIMER_LAST FL_TILED_CLAIMED_LATE" [spin0]="FL_TILED_CLAIMER_LAST FL_TILED_CLAIMED_LATE FL_TILED_SPIN_NS=0" )
V="base last late spin0"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test streaming-spin0 gpu_streaming "" "${D[spin0]}"
run_test stream_watch-spin0 gpu_stream_watch "" "${D[spin0]}"
run_test resident-spin0 gpu_resident "" "${D[spin0]}"
cmp() { # name bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$4" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes $2 $3 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, (streamed, )?tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do for v in $V; do cmp 768k-$v-$round 786432 "$IMG" "${D[$v]}"; done; done
for v in $V; do cmp 768k-$v-phases 786432 "$IMG" "FL_TILED_PHASES ${D[$v]}"; done
for v in $V; do echo "$v $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$v-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
for round in 1 2 3 4 5; do for v in $V; do
  left=$((570 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break 2
  d=$R/wire-$v-$round
  FRAMELOOP_NVRTC_DEFINES="${D[$v]}" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v-$round $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done; done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cp $R/summary.txt $OUT/
cd /tmp && tar -czf $OUT/claimer.tgz claimer
