#!/bin/bash
# Tiled kernel: the post-tile look through the steps in thread 0 only. Tests, then GPU time against 1dad0c5.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/tiled-thread0-tail; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_stream_watch gpu_streaming gpu_resident gpu_fault_fused gpu_reload gpu_loops; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
cmp() { # name binary part bytes config
  left=$((300 - ($(date +%s) - T0)))
  [ $left -lt 20 ] && return
  timeout $((left - 2)) $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
cmp 768k-d-new $B/frameloop 8924 786432 "$IMG"
cmp 768k-d-base $B/frameloop-base 8924 786432 "$IMG"
cmp 2m-d-new $B/frameloop 8924 2097152 ""
cmp 2m-d-base $B/frameloop-base 8924 2097152 ""
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf tiled-thread0-tail.tgz tiled-thread0-tail && rm -rf tiled-thread0-tail
