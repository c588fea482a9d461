#!/bin/bash
# Ingest on an H200 host, CUDA backend with the GPU polling for frames (the comparison since
# ../ingest-gpu-polls/): the ladder against spead2 at 8,972 and 1,472 bytes, two trials a rung,
# receivers and senders pinned as in ../ingest-ladder-2/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/polls2; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; SEND="4,5"
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
timeout ${BUDGET_S:-340} python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop \
  --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 8 --bisect-steps 3 --repeats 2 --tools spead2,frameloop-cuda --sizes 8972,1472 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -9 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-cuda) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
grep -E '^  ring_full ' $R/compare.txt | awk '{print $2}' | sort | uniq -c | sed 's/^/ring_full per trial: /' >> $R/summary.txt
cat $R/summary.txt
cp $R/summary.txt $R/trials.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/polls2.tar.xz polls2
