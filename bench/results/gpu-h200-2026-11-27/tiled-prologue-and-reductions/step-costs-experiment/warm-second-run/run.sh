#!/bin/bash
# Experiment: block 0's and the tail block's own step durations in a streamed tiled frame; code size of the kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r66; mkdir -p $R
export XDG_CACHE_HOME=/tmp/flcache
IMG="--config bench/configs/image-u12.toml"
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 $IMG > $R/768k-d-phases.txt 2>&1
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 2097152 > $R/2m-d-phases.txt 2>&1
grep -h "phases of resident poll, streamed" $R/*-phases.txt | tee -a $R/summary.txt
cd $OUT && tar -czf r66.tgz r66 && rm -rf r66
