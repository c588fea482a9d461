#!/bin/bash
# Review: one pull-range helper for both pull paths, the tiled kernels allowed their shared memory once:
# bench --compare at 768 KiB (image chain), 2 MiB (default chain) and 8 KiB on the same build.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r37; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for t in gpu_resident gpu_streaming gpu_reload; do
  [ -x $B/$t ] || { echo "$t missing" | tee -a $R/summary.txt; continue; }
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | head -20
fl=target/release/frameloop
timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-image.txt 2>&1; echo "768k rc=$?"
for f in 768k-image; do echo "== $f"; grep -E "^resident|^graph|^x floor|MISSED|met\]" $R/$f.txt | cut -c1-150; done
cd $OUT && tar -czf r37.tgz r37 && rm -rf r37
