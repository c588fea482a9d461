#!/bin/bash
# The tiled loop kernel's handed claim in 8 and 32 copies (FL_TILED_HANDED_COPIES) against one, interleaved in one build, with GPU tests of the copies; the sender's catch-up in UDP ingest against spead2; wire rounds of both kernels.
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r20; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
C8="FL_TILED_HANDED_COPIES=8"
C32="FL_TILED_HANDED_COPIES=32"
run_test() { # name binary filter defines
  s=$(date +%s)
  FRAMELOOP_NVRTC_DEFINES="$4" timeout -k 5 150 $B/$2 --include-ignored --test-threads=1 $3 > $R/$1.txt 2>&1; rc=$?
  echo "$1 rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$1.txt | tail -1)" | tee -a $R/summary.txt
}
run_test reload gpu_reload "" ""
run_test reload-C8 gpu_reload "" "$C8"
run_test streaming-C8 gpu_streaming "" "$C8"
run_test resident-C32 gpu_resident "" "$C32"
cmp() { # name bytes config defines
  FRAMELOOP_NVRTC_DEFINES="$4" timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes $2 $3 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, (streamed, )?tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-base-$round 786432 "$IMG" ""
  cmp 768k-C8-$round 786432 "$IMG" "$C8"
  cmp 768k-C32-$round 786432 "$IMG" "$C32"
done
cmp 2m-base 2097158 "" ""
cmp 2m-C8 2097158 "" "$C8"
for v in base C8 C32; do
  defs="FL_TILED_PHASES"; [ $v = C8 ] && defs="$defs $C8"; [ $v = C32 ] && defs="$defs $C32"
  cmp 768k-$v-phases 786432 "$IMG" "$defs"
done
for f in base C8 C32; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/768k-$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
echo "kernels done $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
(
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
  timeout 200 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
    --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-cuda --sizes 8972,1472 \
    --out $R/compare.txt > $R/compare.stdout 2>&1; echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
)
tail -8 $R/compare.txt | tee -a $R/summary.txt
for v in base C8 base C8 base C8 base C8 base C8; do
  left=$((565 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && break
  n=1; while [ -d $R/wire-$v-$n ]; do n=$((n + 1)); done
  d=$R/wire-$v-$n
  defs=""; [ $v = C8 ] && defs="$C8"
  FRAMELOOP_NVRTC_DEFINES="$defs" OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 3)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $v-$n $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt 2>/dev/null | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r20.tgz r20 && rm -rf r20
