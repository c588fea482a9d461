#!/bin/bash
# Receiver floor (a bare busy-polling recvmsg loop, SO_TIMESTAMPNS to the clock after the call) and
# wire to result at 25 Gb/s link pace with the receiver pinned and real-time against plain, one run.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
lscpu | head -20 > $R/lscpu.txt; uname -r >> $R/lscpu.txt
gcc -O2 -o /tmp/rx bench/streaming/rx_floor.c -lpthread 2>$R/rx-build.txt && { for i in 1 2 3; do /tmp/rx; /tmp/rx gro; done > $R/rx-floor.txt 2>&1; cat $R/rx-floor.txt; }
PINNED='realtime_priority = 50
[service]
receiver_cpu = 2
result_cpu = 4'
OUT=$R/link25-busy LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25-busy.log 2>&1; echo "link25-busy rc=$?"; cat $R/link25-busy/summary.txt
OUT=$R/link25-busy-pinned LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000
$PINNED" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25-busy-pinned.log 2>&1; echo "pinned rc=$?"; cat $R/link25-busy-pinned/summary.txt
for d in link25-busy link25-busy-pinned; do for c in small-8k default-2m-on; do echo "== $d $c"; grep -m8 -E "^(wire|assembly|publish_to|compute|done_to|last_rx)" $R/$d/$c/run.txt; done; done
grep -h -i "realtime\|SCHED\|pinned\|cpu" $R/link25-busy-pinned/small-8k/run.txt | head -5

