#!/bin/bash
# Ingest on an H200 host, CUDA backend, 8,972-byte datagrams at fixed rates near where one receiving
# thread runs out (36 and 40 Gb/s), three trials each: spead2, and frameloop's defaults (32 slots,
# one-copy receive, waiting in epoll) against one setting changed at a time: 16 slots, 8 slots, the
# receive buffer copy (receive_into_slots = "off"), and busy-polling (poll_budget_us = 2000).
# Receivers and senders pinned as in ../ingest-ladder-2/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/matrix; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; SEND="4,5"
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
COMMON=(--sender-cpus $SEND --frameloop $B/frameloop --frameloop-base $B/frameloop --frameloop-catch-up 1.05
  --frameloop-base-catch-up 1.05 --frameloop-config-extra "$PIN" --frameloop-base-config-extra "$PIN" --trial-s 1.5
  --frameloop-slack-s 2.5 --bisect-steps 0 --repeats 3 --tools frameloop-cuda,frameloop-base-cuda --sizes 8972)
pair() {  # NAME GBPS ARGS...: defaults against one change at GBPS
  local name=$1 gbps=$2; shift 2
  timeout 120 python3 bench/ingest_compare.py "${COMMON[@]}" --start-gbps $gbps --max-gbps $gbps "$@" \
    --out $R/$name-$gbps.txt > $R/$name-$gbps.stdout 2>&1
  echo "$name at $gbps Gb/s rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
}
timeout 100 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND \
  --trial-s 1.5 --start-gbps 36 --max-gbps 36 --bisect-steps 0 --repeats 3 --tools spead2 --sizes 8972 --out $R/spead2-36.txt > $R/spead2-36.stdout 2>&1
timeout 100 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND \
  --trial-s 1.5 --start-gbps 40 --max-gbps 40 --bisect-steps 0 --repeats 3 --tools spead2 --sizes 8972 --out $R/spead2-40.txt > $R/spead2-40.stdout 2>&1
for g in 36 40; do
  pair slots16 $g --frameloop-base-slots 16
  pair slots8 $g --frameloop-base-slots 8
  pair copy $g --frameloop-base-ingest-extra 'receive_into_slots = "off"'
  pair busypoll $g --frameloop-base-ingest-extra 'poll_budget_us = 2000'
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
done
python3 - $R <<'PY' | tee -a $R/summary.txt
import glob, json, re, statistics, sys
rows = {}
for path in sorted(glob.glob(sys.argv[1] + "/*-[0-9][0-9].txt")):
    pair = re.search(r"/([a-z0-9]+)-(\d+)\.txt$", path)
    for line in open(path):
        m = re.match(r"# (\S+) (\d+) B offered ([\d.]+) Gb/s: (clean|LOSS) load \S+ (\{.*\})$", line.strip())
        if m:
            tool = m.group(1).replace("frameloop-base-cuda", pair.group(1)).replace("frameloop-cuda", "default")
            rows.setdefault((tool, pair.group(2)), []).append((m.group(4), json.loads(m.group(5))))
for (tool, g), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    med = lambda k: statistics.median((r.get(k) or 0.0) for _, r in rs)
    print(f"{g} Gb/s {tool:9s} trials {len(rs)} clean {sum(c == 'clean' for c, _ in rs)} rx {med('rx_gbps'):.2f} Gb/s "
          f"drops {' '.join(str(r.get('kernel_drops', 0)) for _, r in rs)} rx thread s/Gbit {med('rx_thread_cpu_s_per_gbit'):.4f} "
          f"(sys {med('rx_thread_sys_cpu_s_per_gbit'):.4f}) process {med('cpu_s_per_gbit'):.4f} (sys {med('sys_cpu_s_per_gbit'):.4f})")
PY
cp $R/summary.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/matrix.tar.xz matrix
