#!/bin/bash
# Streamed frames: the pull cadence (loop.poll_budget_us caps it) in bench --compare, and wire to result over loopback UDP.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf "$BUNDLE" -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r2; mkdir -p $R
fl=target/release/frameloop
t() { local name=$1; shift; local t0=$(date +%s); timeout 200 "$@" > $R/$name.txt 2>&1; echo "== $name rc=$? $(( $(date +%s) - t0 ))s"; }
for pb in 20 5 2; do
  { cat bench/configs/image-u12.toml; printf '[loop]\npoll_budget_us = %s\n' $pb; } > /tmp/image-$pb.toml
  printf '[loop]\npoll_budget_us = %s\n' $pb > /tmp/default-$pb.toml
  t 768k-image-pb$pb $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config /tmp/image-$pb.toml
  t 2mib-pb$pb $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 --config /tmp/default-$pb.toml
done
for f in $R/*.txt; do echo "== $(basename $f)"; grep -E "^resident poll, streamed|streamed auto" $f | cut -c1-200; done
OUT=$R/wire FRAMELOOP=$fl timeout 200 bench/streaming/run.sh > /dev/null 2>&1; echo "wire rc=$?"; cat $R/wire/summary.txt
OUT=$R/wire5 FRAMELOOP=$fl LOOP_EXTRA='poll_budget_us = 5' timeout 150 bench/streaming/run.sh > /dev/null 2>&1; echo "wire5 rc=$?"; cat $R/wire5/summary.txt
cd $OUT && tar -czf r2.tgz r2 && rm -rf r2
