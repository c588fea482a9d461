#!/bin/bash
# How many bytes each frame's tiles read from the slot after the claim (FL_MARK_SLOT_BYTES), with the phases:
# bench --compare with phase marks at 768 KiB (image), 2 MiB and 8 MiB, twice.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT/r45; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
export FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES
for round in 1 2; do
  timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-$round.txt 2>&1; echo "768k rc=$?"
  timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2m-$round.txt 2>&1; echo "2m rc=$?"
  timeout 200 $fl bench --backend cuda --compare --paths-only --frames 1000 --frame-bytes 8388608 > $R/8m-$round.txt 2>&1; echo "8m rc=$?"
done
for f in $R/7*.txt $R/2m*.txt $R/8m*.txt; do echo "== $(basename $f)"; grep -E "^resident poll, streamed, tiled|^resident poll, tiled|^phases" $f | cut -c1-260; done
cd $OUT && tar -czf r45.tgz r45 && rm -rf r45
