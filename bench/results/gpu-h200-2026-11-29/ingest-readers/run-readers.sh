#!/bin/bash
# Ingest on an H200 host with several reading threads (ingest.reading_threads):
#  1. `frameloop bench` at 8 KiB (CUDA backend, threads pinned): one thread, reading and
#     assembly split (two threads), and two reading threads with the assembly thread;
#  2. the ladder against spead2 at 8,972 and 1,472 bytes, two trials a rung, as ../ingest-split/,
#     with frameloop-split-cuda (one reading thread), -split2-cuda and -split3-cuda.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/readers; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; ASM=6; READERS="7, 8"; SEND="4,5"
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP\nassembly_cpu = $ASM\nreader_cpus = [$READERS]"
# SKIP_BENCH=1: the ladder alone (TOOLS and SIZES choose its tools and sizes).
for mode in $([ -n "${SKIP_BENCH:-}" ] || echo one split split2); do
  { printf '[ingest]\npoll_budget_us = 2000\n'
    [ $mode != one ] && printf 'assembly_thread = true\n'
    [ $mode = split2 ] && printf 'reading_threads = 2\n'
    printf "$PIN\n"; } > $R/bench-$mode.toml
  timeout 40 $B/frameloop bench --backend cuda --frame-bytes 8192 --packet-bytes 8972 --rate 2000 --duration 5 --config $R/bench-$mode.toml > $R/bench-8k-$mode.txt 2>&1
  echo "bench 8k $mode rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
  grep -E "^(latency|wire|assembly|publish_to_detect|compute|end_to_end) " $R/bench-8k-$mode.txt >> $R/summary.txt
done
timeout ${BUDGET_S:-420} python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop \
  --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 8 --bisect-steps 3 --repeats 2 \
  --tools ${TOOLS:-spead2,frameloop-split-cuda,frameloop-split2-cuda,frameloop-split3-cuda} --sizes ${SIZES:-8972,1472} --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -12 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-[a-z0-9-]+) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
grep -E '^  (ring_full|assembly_waits) ' $R/compare.txt | awk '{print $1, $2}' | sort | uniq -c | sed 's/^/per trial: /' >> $R/summary.txt
cat $R/summary.txt
cp $R/summary.txt $R/trials.txt $R/machine.txt $OUT/; cp $R/bench-8k-*.txt $OUT/ 2>/dev/null
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/readers.tar.xz readers
