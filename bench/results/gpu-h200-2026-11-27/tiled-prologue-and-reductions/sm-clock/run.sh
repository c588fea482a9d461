#!/bin/bash
# The SM clock during a streamed tiled frame (phase marks), 768 KiB image and 2 MiB default chain, and the 8 KiB fused figure.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r63; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.applications.graphics,power.draw,pstate --format=csv; nproc; } > $R/machine.txt 2>&1
IMG="--config bench/configs/image-u12.toml"
( sleep 6; nvidia-smi --query-gpu=clocks.sm,clocks.max.sm,power.draw,pstate,utilization.gpu,clocks_throttle_reasons.active --format=csv > $R/smi-during.txt 2>&1 ) &
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 $IMG > $R/768k-d-phases.txt 2>&1
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 2097152 > $R/2m-d-phases.txt 2>&1
grep -h "phases of" $R/*-phases.txt | tee -a $R/summary.txt
cat $R/smi-during.txt $R/machine.txt | tee -a $R/summary.txt
cd $OUT && tar -czf r63.tgz r63 && rm -rf r63
