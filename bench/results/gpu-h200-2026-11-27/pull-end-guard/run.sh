#!/bin/bash
# No pull in the last FL_PULL_END_GUARD_BYTES of a streamed frame (the claiming tiled kernel): streaming tests with and without it, wire at a 25 Gb/s per-datagram pace, bench --compare.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r59; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
for g in 0 32768; do
  export FRAMELOOP_NVRTC_DEFINES="FL_PULL_END_GUARD_BYTES=$g"
  for t in gpu_stream_watch gpu_streaming gpu_resident gpu_wire; do
    timeout -k 5 100 $B/$t --include-ignored --test-threads=1 > $R/$t-guard$g.txt 2>&1; rc=$?
    echo "guard $g $t rc=$rc $(grep -E '^test result' $R/$t-guard$g.txt | tail -1)" | tee -a $R/summary.txt
  done
done
for round in 1 2; do
  for g in 0 32768 65536; do
    export FRAMELOOP_NVRTC_DEFINES="FL_PULL_END_GUARD_BYTES=$g"
    d=$R/wire-guard$g-$round
    OUT=$d CASES="image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
    for c in image-768k-on default-2m-on; do
      echo "guard $g round $round $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
    done
  done
done
for g in 0 32768; do
  export FRAMELOOP_NVRTC_DEFINES="FL_PULL_END_GUARD_BYTES=$g"
  timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-d-guard$g.txt 2>&1
  echo "compare guard $g rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/768k-d-guard$g.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/768k-d-guard$g.txt | sed 's/.*(//')" | tee -a $R/summary.txt
done
cd $OUT && tar -czf r59.tgz r59 && rm -rf r59
