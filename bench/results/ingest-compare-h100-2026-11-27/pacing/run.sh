#!/bin/bash
# gpu_reload with bank switches through the tiled loop kernel; then UDP ingest against spead2 on the GPU machine with frameloop's sender pacing by sleeping and by spinning.
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r10; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
(lscpu | head -20; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv) > $R/machine.txt 2>&1
timeout -k 5 150 $B/gpu_reload --include-ignored --test-threads=1 --nocapture > $R/gpu_reload.txt 2>&1
echo "gpu_reload rc=$? $(( $(date +%s) - T0 ))s $(grep -E '^test result' $R/gpu_reload.txt | tail -1)"
grep -E "^Auto|^Off|B \(|FAILED|panicked" $R/gpu_reload.txt | head -20
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
left=$((580 - ($(date +%s) - T0)))
timeout $left python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop --frameloop-base target/release/frameloop --frameloop-base-pacing spin \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 8972,1472 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$? $(( $(date +%s) - T0 ))s"
tail -9 $R/compare.txt
cd $OUT && tar -czf r10.tgz r10 && rm -rf r10
