#!/bin/bash
# Ingest on an H200 host, CUDA backend: (1) the receiving thread's CPU per Gbit at 32 Gb/s of 8,972-byte
# datagrams, the frame ring in huge pages (frameloop-cuda, the default) against base pages
# (frameloop-base-cuda: the same binary with ring.huge_pages = false), four trials each, taking turns;
# (2) the comparison's ladder against spead2 at 8,972 and 1,472 bytes, receivers and senders pinned as
# in bench/results/ingest-compare-h200-2026-11-28/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/ingest18; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; SEND="4,5"
echo "receiver $RX, result $RES, loop $LOOP, senders $SEND" | tee -a $R/summary.txt
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
timeout 150 python3 bench/ingest_compare.py --sender-cpus $SEND --frameloop $B/frameloop --frameloop-base $B/frameloop \
  --frameloop-catch-up 1.05 --frameloop-base-catch-up 1.05 --frameloop-base-ring-extra "huge_pages = false" \
  --frameloop-config-extra "$PIN" --frameloop-base-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 32 --max-gbps 32 --bisect-steps 0 --repeats 4 \
  --tools frameloop-cuda,frameloop-base-cuda --sizes 8972 --out $R/fixed-8972.txt > $R/fixed-8972.stdout 2>&1
echo "fixed 8972 at 32 Gb/s rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
python3 - $R/fixed-8972.txt <<'PY' | tee -a $R/summary.txt
import json, re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"# (\S+) (\d+) B offered [\d.]+ Gb/s: (clean|LOSS) load \S+ (\{.*\})$", line.strip())
    if m:
        r = json.loads(m.group(4)); rows.setdefault(m.group(1), []).append((m.group(3), r))
for tool, rs in rows.items():
    med = lambda k: statistics.median(r.get(k) or 0.0 for _, r in rs)
    print(f"  {tool:22s} trials {len(rs)} clean {sum(c == 'clean' for c, _ in rs)} rx Gb/s {med('rx_gbps'):.2f} "
          f"rx thread s/Gbit {med('rx_thread_cpu_s_per_gbit'):.4f} (sys {med('rx_thread_sys_cpu_s_per_gbit'):.4f}) "
          f"each {' '.join(format(r.get('rx_thread_cpu_s_per_gbit') or 0.0, '.4f') for _, r in rs)}")
PY
grep -h "huge pages\|frame ring" $R/fixed-8972.txt | sort | uniq -c | head -5 | tee -a $R/summary.txt
left=$((570 - ($(date +%s) - T0)))
timeout $left python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop \
  --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 8 --bisect-steps 3 --repeats 2 --tools spead2,frameloop-cuda --sizes 8972,1472 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -9 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-cuda) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
cat $R/summary.txt
cp $R/summary.txt $R/trials.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/ingest18.tar.xz ingest18
