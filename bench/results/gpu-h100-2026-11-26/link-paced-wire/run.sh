#!/bin/bash
# Wire to result with the sender at a link's pace (--link-gbps) against the burst sender, same build, same run.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
nproc > $R/nproc.txt
OUT=$R/burst-busy INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/burst-busy.log 2>&1; echo "burst-busy rc=$?"; cat $R/burst-busy/summary.txt
OUT=$R/link25-busy LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25-busy.log 2>&1; echo "link25-busy rc=$?"; cat $R/link25-busy/summary.txt
OUT=$R/link25 LINK_GBPS=25 FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25.log 2>&1; echo "link25 rc=$?"; cat $R/link25/summary.txt
OUT=$R/link10-busy LINK_GBPS=10 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link10-busy.log 2>&1; echo "link10-busy rc=$?"; cat $R/link10-busy/summary.txt
for d in burst-busy link25-busy; do for c in image-768k-on default-2m-on; do echo "== $d $c"; grep -m8 -E "^(wire|assembly|publish_to|compute|done_to|last_rx|end_to)" $R/$d/$c/run.txt; done; done

