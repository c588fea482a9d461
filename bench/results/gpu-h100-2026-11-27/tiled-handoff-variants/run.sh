#!/bin/bash
# Tiled kernel: frame handed to the blocks with the verdict; variants by defines (two passes, tight spin, reduce samples per thread) against HEAD.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/variants; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
s=$(date +%s); timeout -k 5 130 $B/gpu_ops --include-ignored --test-threads=1 tiled > $R/gpu_ops.txt 2>&1; echo "gpu_ops tiled rc=$? $(( $(date +%s) - s ))s $(grep -E '^test result' $R/gpu_ops.txt | tail -1)" | tee -a $R/summary.txt
for t in gpu_stream_watch gpu_streaming gpu_resident; do
  s=$(date +%s)
  timeout -k 5 60 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cmp() { # name binary part bytes config [defines]
  FRAMELOOP_NVRTC_DEFINES="${6:-}" timeout 60 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
for round in 1 2; do
  cmp 768k-base-$round $B/frameloop-base 8924 786432 "$IMG"
  cmp 768k-new-$round $B/frameloop 8924 786432 "$IMG"
done
cmp 768k-spin0 $B/frameloop 8924 786432 "$IMG" "FL_TILED_SPIN_NS=0"
cmp 2m-base $B/frameloop-base 8924 2097152 ""
cmp 2m-new $B/frameloop 8924 2097152 ""
cmp 768k-base-phases $B/frameloop-base 8924 786432 "$IMG" FL_TILED_PHASES
cmp 768k-new-phases $B/frameloop 8924 786432 "$IMG" FL_TILED_PHASES
cmp 768k-passes-phases $B/frameloop 8924 786432 "$IMG" "FL_TILED_PHASES FL_EXP_PASSES"
cmp 768k-spin0-phases $B/frameloop 8924 786432 "$IMG" "FL_TILED_PHASES FL_TILED_SPIN_NS=0"
cmp 768k-rs8-phases $B/frameloop 8924 786432 "$IMG" "FL_TILED_PHASES FL_TILED_REDUCE_SAMPLES_PER_THREAD=8u"
cmp 768k-rs32-phases $B/frameloop 8924 786432 "$IMG" "FL_TILED_PHASES FL_TILED_REDUCE_SAMPLES_PER_THREAD=32u"
cmp 2m-passes-phases $B/frameloop 8924 2097152 "" "FL_TILED_PHASES FL_EXP_PASSES"
cmp 2m-new-phases $B/frameloop 8924 2097152 "" "FL_TILED_PHASES"
for f in 768k-base 768k-new 768k-passes 768k-spin0 768k-rs8 768k-rs32 2m-new 2m-passes; do echo "$f $(grep -h "phases of resident poll, streamed, tiled" $R/$f-phases.txt | sed 's/.*detection)://')"; done | tee -a $R/summary.txt
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf variants.tgz variants && rm -rf variants
