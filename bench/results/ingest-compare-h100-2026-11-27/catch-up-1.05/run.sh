#!/bin/bash
# UDP ingest against spead2 on a GPU host: frameloop's sender catching up at 1.25x (its default) against 1.05x (spead2_send's default burst rate ratio), same receiver build.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r29; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; lscpu; echo siblings; cat /sys/devices/system/cpu/cpu*/topology/thread_siblings_list | sort -u | tr '\n' ' '; echo; echo perf: $(command -v perf) paranoid $(cat /proc/sys/kernel/perf_event_paranoid 2>&1); uname -r; } > $R/machine.txt 2>&1
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
s=$(date +%s)
timeout 570 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --frameloop-base $B/frameloop --frameloop-catch-up 1.05 --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 8972,1472 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -12 $R/compare.stdout >> $R/summary.txt
