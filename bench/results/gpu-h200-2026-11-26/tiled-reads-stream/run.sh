#!/bin/bash
# The tiled kernel reading a streamed frame's tail from the slot itself (no tail node): GPU tests, ncu, bench --compare.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r11; mkdir -p $R
t() { local name=$1; shift; local t0=$(date +%s); timeout 240 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^test result|FAILED|panicked" $R/$name.txt | head -5; }
t gpu_ops_tiled $B/gpu_ops tiled --include-ignored
t gpu_streaming $B/gpu_streaming --include-ignored
t gpu_resident $B/gpu_resident --include-ignored
fl=target/release/frameloop
t 768k-image $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml
t 2mib $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152
t 8mib $fl bench --backend cuda --compare --paths-only --frames 400 --frame-bytes 8388608
t fft-2mib $fl bench --backend cuda --compare --paths-only --frames 500 --frame-bytes 2097152 --config bench/configs/fft-chain.toml
for f in 768k-image 2mib 8mib fft-2mib; do echo "== $f"; grep -E "^resident poll, streamed|streamed auto" $R/$f.txt | cut -c1-180; done
cd $OUT && tar -czf r11.tgz r11 && rm -rf r11
