#!/bin/bash
# bench --compare on chains the tiled kernel cannot run (fft; a 40000-wide filter2d) at large frames, and the tiled GPU tests.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r10; mkdir -p $R
t() { local name=$1; shift; local t0=$(date +%s); timeout 200 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; grep -E "^test result|FAILED|panicked|^error|Error" $R/$name.txt | head -5; }
t gpu_ops_tiled $B/gpu_ops tiled --include-ignored
fl=target/release/frameloop
t fft-2mib $fl bench --backend cuda --compare --paths-only --frames 500 --frame-bytes 2097152 --config bench/configs/fft-chain.toml
printf '[[chain]]\nop = "unpack"\nformat = "u16"\n[[chain]]\nop = "filter2d"\nwidth = 40000\nkernel = [0.1,0.1,0.1,0.1,0.2,0.1,0.1,0.1,0.1]\n[[chain]]\nop = "stats"\n' > /tmp/wide.toml
t wide-1mib $fl bench --backend cuda --compare --paths-only --frames 500 --frame-bytes 1048576 --config /tmp/wide.toml
for f in fft-2mib wide-1mib; do echo "== $f"; grep -E "^resident poll|^graph-launch|large frames|tiled kernel, so" $R/$f.txt | cut -c1-220; done
cd $OUT && tar -czf r10.tgz r10 && rm -rf r10
