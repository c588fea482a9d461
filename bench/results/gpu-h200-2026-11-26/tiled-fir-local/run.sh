#!/bin/bash
# FIR interior in 32-bit local indices without a per-output branch: GPU tests, ncu, bench --compare.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r13; mkdir -p $R
t() { local name=$1; shift; local t0=$(date +%s); timeout 240 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^test result|FAILED|panicked" $R/$name.txt | head -5; }
t gpu_ops_tiled $B/gpu_ops tiled --include-ignored
t gpu_streaming $B/gpu_streaming --include-ignored
t ncu-tiled /usr/local/cuda/bin/ncu --kernel-name regex:fl_fused_tiled --launch-count 6 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $B/gpu_ops tiled_fused_chains_give_identical_bits --include-ignored
grep -E "duration|inst_executed" $R/ncu-tiled.txt | head -4
fl=target/release/frameloop
t 768k-image $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml
t 2mib $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152
t 8mib $fl bench --backend cuda --compare --paths-only --frames 400 --frame-bytes 8388608
for f in 768k-image 2mib 8mib; do echo "== $f"; grep -E "^resident poll, streamed|streamed auto" $R/$f.txt | cut -c1-180; done
cd $OUT && tar -czf r13.tgz r13 && rm -rf r13
