#!/bin/bash
# One offered rate (26 Gb/s of 1,472 B), CUDA backend pinned apart, three trials per setting, settings interleaved: ring of 32 slots (the comparison's), 16 slots, 32 slots with receive batches of 8 buffers.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/ring; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; } > $R/machine.txt 2>&1
T0=$(date +%s)
one() { # name slots ingest-extra
  timeout 60 python3 bench/ingest_compare.py --frameloop $B/frameloop --frameloop-config-extra '[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11' --frameloop-slots $2 --frameloop-ingest-extra "$3" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 26 --max-gbps 26 --repeats 3 --tools frameloop-cuda --sizes 1472 --out $R/$1.txt > $R/$1.stdout 2>&1
  echo "$1 rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
}
for round in 1 2; do
  one s32-$round 32 ""
  one s16-$round 16 ""
  one b8-$round 32 "batch = 8"
done
cp $R/summary.txt $OUT/
cd /tmp && tar -czf $OUT/ring.tgz ring
