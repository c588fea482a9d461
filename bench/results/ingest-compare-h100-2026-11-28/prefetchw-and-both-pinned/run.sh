#!/bin/bash
# Receiving-thread CPU per Gbit at one offered rate, the current build against the same build with prefetchw for the slot's lines, interleaved (CUDA backend, threads pinned apart); then the comparison's ladder, both receivers pinned, spead2 against the current build.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/pw; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3'; grep -o -w -E 'prfchw|3dnowprefetch' /proc/cpuinfo | sort | uniq -c; } > $R/machine.txt 2>&1
T0=$(date +%s)
PIN='[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11'
one() { # name binary size gbps
  timeout 60 python3 bench/ingest_compare.py --frameloop $B/$2 --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps $4 --max-gbps $4 --repeats 3 --tools frameloop-cuda --sizes $3 --out $R/$1.txt > $R/$1.stdout 2>&1
  echo "$1 rc=$? $(( $(date +%s) - T0 ))s $(grep -E '^frameloop-cuda' $R/$1.stdout | tail -1)" >> $R/summary.txt
}
for round in 1 2 3; do
  one new-1472-$round frameloop 1472 24
  one pw-1472-$round frameloop-prefetchw 1472 24
done
for round in 1 2; do
  one new-8972-$round frameloop 8972 30
  one pw-8972-$round frameloop-prefetchw 8972 30
done
s=$(date +%s)
timeout $((575 - (s - T0))) python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus 3,7 --frameloop $B/frameloop --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -6 $R/compare.stdout >> $R/summary.txt
cp $R/summary.txt $OUT/
xz -9 $R/compare.txt
cd /tmp && tar -czf $OUT/pw.tgz pw
