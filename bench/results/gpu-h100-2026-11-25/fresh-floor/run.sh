#!/bin/bash
# bench --compare --paths-only with the freshly-written-frame floor: 8 KiB, 768 KiB image, 2 MiB, 8 MiB.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
R=$OUT/fresh; mkdir -p $R
fl=/tmp/fl/frameloop
$fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
$fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-image.txt 2>&1
$fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2mib.txt 2>&1
$fl bench --backend cuda --compare --paths-only --frames 500 --frame-bytes 8388608 > $R/8mib.txt 2>&1
for f in $R/*.txt; do echo "== $(basename $f)"; grep -E "^floor|^resident poll|^graph-launch|large frames" $f | cut -c1-230; done
cd $OUT && tar -czf fresh.tgz fresh && rm -rf fresh
