#!/bin/bash
# Why the claiming tiled kernel is slow on frames read in place: the same compare at poll budgets
# of 1000 (default), 100 and 20 µs.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r26; mkdir -p $R
fl=target/release/frameloop
for b in 1000 100 20; do
  printf '[loop]\npoll_budget_us = %s\n' $b > $R/budget-$b.toml
  timeout 150 $fl bench --backend cuda --compare --paths-only --frames 1000 --frame-bytes 2097152 --config $R/budget-$b.toml > $R/2mib-budget-$b.txt 2>&1; echo "2mib $b rc=$?"
  echo "== budget $b"; grep -E "^resident|^graph" $R/2mib-budget-$b.txt | cut -c1-160
done
cd $OUT && tar -czf r26.tgz r26 && rm -rf r26
