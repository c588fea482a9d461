#!/bin/bash
# CUDA backend at fixed offered rates: cefdc68 (base) against the light result spin (new), unpinned; the new build with result_spin_us = 0 and with its threads pinned apart; spead2; a sampler of which CPU each thread runs on.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/r37; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu; for c in $(ls -d /sys/devices/system/cpu/cpu[0-9]* | sort -V); do echo "$(basename $c) siblings $(cat $c/topology/thread_siblings_list) core $(cat $c/topology/core_id) pkg $(cat $c/topology/physical_package_id)"; done; } > $R/machine.txt 2>&1
( while true; do echo "T $(date +%s.%N)"; ps -eLo pid,tid,psr,pcpu,comm,args --no-headers | grep -E 'frameloop|spead2' | grep -v grep | cut -c1-120; sleep 0.1; done ) > $R/placement.txt 2>&1 &
SP=$!
run() { # name size gbps tools base-extra new-extra
  local s=$(date +%s)
  echo "START $1 $(date +%s.%N)" >> $R/placement.txt
  timeout 200 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --frameloop-base $7 --frameloop-base-catch-up 1.05 \
    --frameloop-base-config-extra "$5" --frameloop-config-extra "$6" --trial-s 1.5 --frameloop-slack-s 2.5 \
    --start-gbps $3 --max-gbps $3 --bisect-steps 0 --repeats 4 --tools $4 --sizes $2 --out $R/$1.txt > $R/$1.stdout 2>&1
  echo "$1 rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
  echo "END $1 $(date +%s.%N)" >> $R/placement.txt
}
P_ALL='[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11'
S0='[service]\nresult_spin_us = 0'
run a-8972 8972 32 spead2,frameloop-base-cuda,frameloop-cuda '' '' $B/frameloop-base
run b-8972 8972 32 frameloop-base-cuda,frameloop-cuda "$S0" "$P_ALL" $B/frameloop
run a-1472 1472 24 spead2,frameloop-base-cuda,frameloop-cuda '' '' $B/frameloop-base
run b-1472 1472 24 frameloop-base-cuda,frameloop-cuda "$S0" "$P_ALL" $B/frameloop
kill $SP
for f in $R/*.stdout; do echo "== $f"; tail -6 $f; done >> $R/summary.txt
cp $R/summary.txt $OUT/
tar -cJf $OUT/r37.tar.xz -C /tmp r37
