#!/bin/bash
# The tiled kernel with FIR compiled for short tap counts: GPU tests against the CPU, its duration under ncu,
# and bench --compare at the large sizes and at 8 KiB.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r8; mkdir -p $R
t() { local name=$1; shift; local t0=$(date +%s); timeout 200 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^test result|FAILED|panicked" $R/$name.txt | head -5; }
t gpu_ops_tiled $B/gpu_ops tiled --include-ignored
t gpu_streaming $B/gpu_streaming --include-ignored
t gpu_resident_large $B/gpu_resident large --include-ignored
t ncu-tiled /usr/local/cuda/bin/ncu --kernel-name regex:fl_fused_tiled --launch-count 6 --metrics gpu__time_duration.sum,smsp__inst_executed.sum $B/gpu_ops tiled_fused_chains_give_identical_bits --include-ignored
grep -E "duration|inst_executed" $R/ncu-tiled.txt
fl=target/release/frameloop
t 768k-image $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml
t 2mib $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152
t 8mib $fl bench --backend cuda --compare --paths-only --frames 400 --frame-bytes 8388608
t 8k $fl bench --backend cuda --compare --frames 4000 --frame-bytes 8192
for f in 768k-image 2mib 8mib 8k; do echo "== $f"; grep -E "^resident poll|^graph-launch|large frames|resident p50" $R/$f.txt | cut -c1-200; done
cd $OUT && tar -czf r8.tgz r8 && rm -rf r8
