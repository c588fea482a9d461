#!/bin/bash
# Experiment: block 0's reduce split (accumulate / combine) and filter2d time, with and without the 3x3 kernel in registers.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r67; mkdir -p $R
IMG="--config bench/configs/image-u12.toml"
for d in "FL_TILED_PHASES" "FL_TILED_PHASES FL_EXP_KREG"; do
  n=$(echo $d | tr ' ' '-')
  FRAMELOOP_NVRTC_DEFINES="$d" timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 $IMG > $R/768k-$n.txt 2>&1
  echo "$d: $(grep -h 'phases of resident poll, streamed, tiled' $R/768k-$n.txt)" | tee -a $R/summary.txt
done
cd $OUT && tar -czf r67.tgz r67 && rm -rf r67
