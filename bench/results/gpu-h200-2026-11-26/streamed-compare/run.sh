#!/bin/bash
# GPU tests of the tiled kernel on both frame sources, streaming end to end, and bench --compare with the streamed modes.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r1; mkdir -p $R
(date; nvidia-smi -L; lscpu; lscpu -e; nproc) > $R/machine.txt 2>&1
t() { local name=$1; shift; local t0=$(date +%s); timeout 240 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^test result|FAILED|panicked" $R/$name.txt | head -5; }
t gpu_ops_tiled $B/gpu_ops tiled --include-ignored
t gpu_streaming $B/gpu_streaming --include-ignored
t gpu_resident_large $B/gpu_resident large --include-ignored
fl=target/release/frameloop
t 768k-image $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml
t 2mib $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152
t 8mib $fl bench --backend cuda --compare --paths-only --frames 400 --frame-bytes 8388608
t 8k $fl bench --backend cuda --compare --frames 4000 --frame-bytes 8192
for f in 768k-image 2mib 8mib 8k; do echo "== $f"; grep -E "^floor|^resident poll|^graph-launch|large frames|resident p50|streamed" $R/$f.txt | cut -c1-250; done
cd $OUT && tar -czf r1.tgz r1 && rm -rf r1
