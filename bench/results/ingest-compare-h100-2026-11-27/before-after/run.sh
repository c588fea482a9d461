#!/bin/bash
# UDP ingest against spead2 on the GPU machine, CUDA backend: the build before the receiver's timeout-by-arrival change and after, interleaved; then 8 KiB bench latency of both builds.
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/ingest; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
(lscpu | head -20; nproc; nvidia-smi --query-gpu=name,driver_version --format=csv) > $R/machine.txt 2>&1
timeout 470 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop --frameloop-base $B/frameloop-base --frameloop-base-pacing sleep \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 8972,1472 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$? $(( $(date +%s) - T0 ))s"
tail -12 $R/compare.txt
for b in frameloop-base frameloop; do
  [ $(( $(date +%s) - T0 )) -gt 560 ] && break
  timeout 25 $B/$b bench --backend cuda --frames 4000 --frame-bytes 8192 > $R/bench-8k-$b.txt 2>&1; echo "bench $b rc=$?"
  grep -iE "p50|p99" $R/bench-8k-$b.txt | head -4
done
echo "elapsed $(( $(date +%s) - T0 ))"
cd $OUT && tar -czf ingest.tgz ingest && rm -rf ingest
