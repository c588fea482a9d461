#!/bin/bash
# A puller block beside the claiming tiled kernel's tiles: GPU tests, wire to result (new against the build before, alternating), bench --compare.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r61; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
for t in gpu_stream_watch gpu_resident gpu_streaming gpu_wire gpu_loops gpu_fault gpu_reload gpu_kernels_compile; do
  timeout -k 5 120 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -h "held frames pulled" $R/gpu_stream_watch.txt | tee -a $R/summary.txt
for round in 1 2; do
  for v in new base; do
    bin=$B/frameloop; [ $v = base ] && bin=$B/frameloop-base
    d=$R/wire-$v-$round
    OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 80 bash bench/streaming/run.sh > /dev/null 2>&1
    for c in small-8k image-768k-on default-2m-on; do
      echo "$v round $round $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
    done
  done
done
cmp() { # name binary part bytes config [defines]
  FRAMELOOP_NVRTC_DEFINES="${6:-}" timeout 100 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
cmp 768k-d-new $B/frameloop 8924 786432 "$IMG"
cmp 768k-d-base $B/frameloop-base 8924 786432 "$IMG"
cmp 768k-g-new $B/frameloop 65536 786432 "$IMG"
cmp 768k-g-base $B/frameloop-base 65536 786432 "$IMG"
cmp 768k-d-new-phases $B/frameloop 8924 786432 "$IMG" FL_TILED_PHASES
cmp 2m-d-new $B/frameloop 8924 2097152 ""
grep -h "phases of resident poll, streamed, tiled" $R/768k-d-new-phases.txt | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r61.tgz r61 && rm -rf r61
