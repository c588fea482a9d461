#!/bin/bash
# Ingest on an H200 host, CUDA backend with the GPU polling for frames (the comparison's loop since
# ../ingest-gpu-polls/): at fixed rates near one receiving thread's limit, three trials each, the
# comparison's frameloop-cuda (32 slots, receive_into_slots = "auto") against the same binary and
# sender with one change: 16 slots (8,972 B at 36 Gb/s, 1,472 B at 24 and 26) and one-copy receive
# at 1,472 B (receive_into_slots = "on"); spead2 at the same rates. Pinned as in ../ingest-ladder-2/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/slots; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
T0=$(date +%s)
RX=1; RES=2; LOOP=3; SEND="4,5"
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
pair() {  # NAME SIZE GBPS ARGS...: the comparison's frameloop-cuda against one change
  local name=$1 size=$2 gbps=$3; shift 3
  timeout 120 python3 bench/ingest_compare.py --sender-cpus $SEND --frameloop $B/frameloop --frameloop-base $B/frameloop \
    --frameloop-catch-up 1.05 --frameloop-base-catch-up 1.05 --frameloop-base-pacing sleep \
    --frameloop-config-extra "$PIN" --frameloop-base-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 \
    --bisect-steps 0 --repeats 3 --tools frameloop-cuda,frameloop-base-cuda --sizes $size --start-gbps $gbps --max-gbps $gbps \
    "$@" --out $R/$name-$size-$gbps.txt > $R/$name-$size-$gbps.stdout 2>&1
  echo "$name $size B at $gbps Gb/s rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
}
spead() {  # SIZE GBPS
  timeout 100 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND \
    --trial-s 1.5 --start-gbps $2 --max-gbps $2 --bisect-steps 0 --repeats 3 --tools spead2 --sizes $1 --out $R/spead2-$1-$2.txt > $R/spead2-$1-$2.stdout 2>&1
}
spead 8972 36; spead 1472 26; spead 1472 28
pair slots16 8972 36 --frameloop-base-slots 16
pair slots16 1472 24 --frameloop-base-slots 16
pair onecopy 1472 24 --frameloop-base-ingest-extra 'receive_into_slots = "on"'
[ $(( $(date +%s) - T0 )) -lt 330 ] && pair slots16 1472 26 --frameloop-base-slots 16
[ $(( $(date +%s) - T0 )) -lt 400 ] && pair onecopy 1472 26 --frameloop-base-ingest-extra 'receive_into_slots = "on"'
python3 - $R <<'PY' | tee -a $R/summary.txt
import glob, json, re, statistics, sys
rows = {}
for path in sorted(glob.glob(sys.argv[1] + "/*.txt")):
    m = re.search(r"/([a-z0-9]+)-(\d+)-(\d+)\.txt$", path)
    if not m:
        continue
    for line in open(path):
        t = re.match(r"# (\S+) (\d+) B offered ([\d.]+) Gb/s: (clean|LOSS) load \S+ (\{.*\})$", line.strip())
        if t:
            tool = t.group(1).replace("frameloop-base-cuda", m.group(1)).replace("frameloop-cuda", "default")
            rows.setdefault((m.group(2), int(m.group(3)), tool), []).append((t.group(4), json.loads(t.group(5))))
for (size, g, tool), rs in sorted(rows.items()):
    med = lambda k: statistics.median((r.get(k) or 0.0) for _, r in rs)
    print(f"{size} B {g} Gb/s {tool:8s} clean {sum(c == 'clean' for c, _ in rs)} of {len(rs)} sent {med('sent_gbps'):.2f} rx {med('rx_gbps'):.2f} "
          f"kernel drops {' '.join(str(r.get('kernel_drops', 0)) for _, r in rs)} incomplete {' '.join(str(r.get('incomplete', 0)) for _, r in rs)} "
          f"rx thread s/Gbit {med('rx_thread_cpu_s_per_gbit'):.4f} (sys {med('rx_thread_sys_cpu_s_per_gbit'):.4f}) process {med('cpu_s_per_gbit'):.4f}")
PY
for f in $R/slots16-*.txt $R/onecopy-*.txt; do echo "$(basename $f) ring_full: $(grep -E '^  ring_full ' $f | awk '{print $2}' | tr '\n' ' ')"; done >> $R/summary.txt
cat $R/summary.txt
cp $R/summary.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/slots.tar.xz slots
