#!/bin/bash
# The tiled kernel: halos held as a multiple of 4 samples, so unpacked chunks go to shared memory in 16-byte stores. Tests against the CPU, phases, GPU time against the build before.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r68; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_resident gpu_streaming gpu_stream_watch gpu_fault_fused gpu_reload; do
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
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
cmp 2m-d-new $B/frameloop 8924 2097152 ""
cmp 2m-d-base $B/frameloop-base 8924 2097152 ""
for v in new base; do
  bin=$B/frameloop; [ $v = base ] && bin=$B/frameloop-base
  d=$R/wire-$v
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "$v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
for f in $R/768k-d-*.txt; do echo "in place $(basename $f) $(grep -E '^resident poll, tiled fused kernel ' $f | awk '{print "p50",$(NF-8),"gpu",$(NF-1)}')"; done | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r68.tgz r68 && rm -rf r68
