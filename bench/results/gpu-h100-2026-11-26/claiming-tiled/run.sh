#!/bin/bash
# The tiled kernel claiming its own frames: GPU tests, then bench --compare at 768 KiB image,
# 2 MiB default and 8 KiB on the same build.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r25; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
s=$(date +%s)
timeout -k 5 120 $B/gpu_resident --include-ignored --test-threads=1 tiled > $R/gpu_resident_tiled.txt 2>&1; echo "gpu_resident tiled rc=$? $(( $(date +%s) - s ))s $(grep -E '^test result' $R/gpu_resident_tiled.txt | tail -1)" | tee -a $R/summary.txt
for t in gpu_streaming gpu_resident gpu_ops; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | head -20
fl=target/release/frameloop
timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-image.txt 2>&1; echo "768k rc=$?"
timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2mib.txt 2>&1; echo "2mib rc=$?"
timeout 100 $fl bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k.txt 2>&1; echo "8k rc=$?"
for f in 768k-image 2mib 8k; do echo "== $f"; grep -E "^resident|^graph|^x floor|MET|MISSED|claiming" $R/$f.txt | cut -c1-190; done
cd $OUT && tar -czf r25.tgz r25 && rm -rf r25
