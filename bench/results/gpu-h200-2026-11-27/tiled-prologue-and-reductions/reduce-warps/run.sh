#!/bin/bash
# The tiled kernel's reductions on as few warps as a tile needs (and the last block's over the blocks' partials): tests against the CPU, phases, GPU time against the puller build.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r64; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_resident gpu_streaming gpu_stream_watch gpu_fault_fused; do
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
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r64.tgz r64 && rm -rf r64
