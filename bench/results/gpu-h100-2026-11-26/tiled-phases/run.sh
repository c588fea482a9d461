#!/bin/bash
# Where the claiming tiled kernel's GPU time goes: bench --compare with FL_TILED_PHASES marks, 768 KiB image and 2 MiB.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
export XDG_CACHE_HOME=/tmp/cache-phases
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-phases.txt 2>&1; echo "768k-phases rc=$?"
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2m-phases.txt 2>&1; echo "2m-phases rc=$?"
XDG_CACHE_HOME=/tmp/cache-plain timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-plain.txt 2>&1; echo "768k-plain rc=$?"
for f in 768k-phases 2m-phases 768k-plain; do echo "== $f"; grep -E "^resident|^graph|^phases|MISSED|met\]" $R/$f.txt | cut -c1-200; done

