#!/bin/bash
# frameloop alone at 8,972 B (CUDA backend): default, copying receiver, 64 slots, receiver pinned to core 2,
# and spead2 last, one search each.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r20; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
one() { local name=$1; shift; timeout 100 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 16 --bisect-steps 3 --sizes 8972 \
  --out $R/$name.txt "$@" > $R/$name.stdout 2>&1; echo "$name rc=$? $(grep -E '^(spead2|frameloop)' $R/$name.txt | tail -1)"; }
one warmup --tools frameloop-cuda
one default --tools frameloop-cuda
one copy --tools frameloop-copy-cuda
one slots64 --tools frameloop-cuda --frameloop-slots 64
one pinned --tools frameloop-cuda --frameloop-config-extra $'[service]\nreceiver_cpu = 2\n'
one default2 --tools frameloop-cuda
one spead2 --tools spead2
cd $OUT && tar -czf r20.tgz r20 && rm -rf r20
