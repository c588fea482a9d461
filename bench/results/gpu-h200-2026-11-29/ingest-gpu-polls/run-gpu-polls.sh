#!/bin/bash
# Ingest on an H200 host, CUDA backend, with the comparison's loop for the CUDA backend now the
# appliance's default (the GPU polls for frames) instead of the host backend's nap of 100 us when no
# frame waits: (1) at 36 and 40 Gb/s of 8,972-byte datagrams, three trials each, the new loop
# (frameloop-cuda) against the old one (frameloop-base-cuda, same binary); (2) the ladder against
# spead2 at 8,972 and 1,472 bytes, two trials a rung. Receivers and senders pinned as in ../ingest-ladder-2/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/polls; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; SEND="4,5"
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
for g in 36 40; do
  timeout 100 python3 bench/ingest_compare.py --sender-cpus $SEND --frameloop $B/frameloop --frameloop-base $B/frameloop \
    --frameloop-catch-up 1.05 --frameloop-base-catch-up 1.05 --frameloop-config-extra "$PIN" --frameloop-base-config-extra "$PIN" \
    --frameloop-base-loop-extra 'poll_budget_us = 0\ndata_not_ready_sleep_interval_us = 100' --trial-s 1.5 --frameloop-slack-s 2.5 \
    --bisect-steps 0 --repeats 3 --tools frameloop-cuda,frameloop-base-cuda --sizes 8972 --start-gbps $g --max-gbps $g \
    --out $R/ab-$g.txt > $R/ab-$g.stdout 2>&1
  echo "a/b at $g Gb/s rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
done
python3 - $R <<'PY' | tee -a $R/summary.txt
import glob, json, re, statistics, sys
for path in sorted(glob.glob(sys.argv[1] + "/ab-*.txt")):
    rows = {}
    for line in open(path):
        m = re.match(r"# (\S+) (\d+) B offered ([\d.]+) Gb/s: (clean|LOSS) load \S+ (\{.*\})$", line.strip())
        if m:
            rows.setdefault((m.group(1), m.group(3)), []).append((m.group(4), json.loads(m.group(5))))
    for (tool, g), rs in sorted(rows.items()):
        med = lambda k: statistics.median((r.get(k) or 0.0) for _, r in rs)
        print(f"{g} Gb/s {tool:20s} clean {sum(c == 'clean' for c, _ in rs)} of {len(rs)} sent {med('sent_gbps'):.2f} rx {med('rx_gbps'):.2f} Gb/s "
              f"kernel drops {' '.join(str(r.get('kernel_drops', 0)) for _, r in rs)} incomplete {' '.join(str(r.get('incomplete', 0)) for _, r in rs)} "
              f"rx thread s/Gbit {med('rx_thread_cpu_s_per_gbit'):.4f}")
PY
grep -h "ring_full  " $R/ab-*.txt | head -12 | tr -s ' ' >> $R/summary.txt
left=$((575 - ($(date +%s) - T0)))
timeout $left python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop \
  --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 8 --bisect-steps 3 --repeats 2 --tools spead2,frameloop-cuda --sizes 8972,1472 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -9 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-cuda) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
cat $R/summary.txt
cp $R/summary.txt $R/trials.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/polls.tar.xz polls
