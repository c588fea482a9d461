#!/bin/bash
# `frameloop bench` at 8 KiB on an H200 host, one receiving thread against two
# (ingest.assembly_thread), after the receiving thread was made to wait for the
# assembly thread's start before reading: twice each, alternating, pinned as in ../run-split.sh.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/ready; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3'; } > $R/machine.txt 2>&1
PIN="[service]\nreceiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3\nassembly_cpu = 6"
for round in 1 2; do for mode in one two; do
  { printf '[ingest]\npoll_budget_us = 2000\n'; [ $mode = two ] && printf 'assembly_thread = true\n'; printf "$PIN\n"; } > $R/bench-$mode.toml
  timeout 40 $B/frameloop bench --backend cuda --frame-bytes 8192 --packet-bytes 8972 --rate 2000 --duration 5 --config $R/bench-$mode.toml > $R/bench-8k-$mode-$round.txt 2>&1
  echo "bench 8k $mode round $round rc=$?" >> $R/summary.txt
  grep -E "^(latency|wire|assembly|publish_to_detect|end_to_end) |busy_poll_gaps|assembly_waits" $R/bench-8k-$mode-$round.txt >> $R/summary.txt
done; done
cat $R/summary.txt
cp $R/* $OUT/
