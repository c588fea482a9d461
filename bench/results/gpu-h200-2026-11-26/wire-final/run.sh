#!/bin/bash
# Wire to result over loopback UDP with the final build: the receiver waiting in epoll, and busy-polling (ingest.poll_budget_us).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r12; mkdir -p $R
fl=target/release/frameloop
OUT=$R/wire FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > /dev/null 2>&1; echo "wire rc=$?"; cat $R/wire/summary.txt
OUT=$R/wire-poll FRAMELOOP=$fl INGEST_EXTRA='poll_budget_us = 2000' timeout 200 bench/streaming/run.sh > /dev/null 2>&1; echo "wire-poll rc=$?"; cat $R/wire-poll/summary.txt
for d in $R/wire/*/ $R/wire-poll/*/; do echo "$d compute $(grep -m1 -E '^compute ' $d/run.txt | tr -s ' ' | cut -d' ' -f2-3) p2d $(grep -m1 -E '^publish_to_detect ' $d/run.txt | tr -s ' ' | cut -d' ' -f2-3)"; done
cd $OUT && tar -czf r12.tgz r12 && rm -rf r12
