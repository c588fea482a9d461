#!/bin/bash
# Acquire-release tickets in the pulls and the graph reduction (new) against the tiled-only change (base), alternating.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r56; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
c768="--frame-bytes 786432 --config bench/configs/image-u12.toml"
run() { # NAME BIN PART SIZEARGS...
  local name=$1 bin=$2 part=$3; shift 3
  timeout 100 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $part "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^resident poll, streamed, (tiled fused kernel|graph IF body) ' $R/$name.txt | awk '{print $4,"p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
for i in 1 2 3; do
  run 768k-d-new-$i frameloop 8924 $c768
  run 768k-d-base-$i frameloop-base 8924 $c768
done
for i in 1 2; do
  run 2m-d-new-$i frameloop 8924 --frame-bytes 2097152
  run 2m-d-base-$i frameloop-base 8924 --frame-bytes 2097152
done
cd $OUT && tar -czf r56.tgz r56 && rm -rf r56
