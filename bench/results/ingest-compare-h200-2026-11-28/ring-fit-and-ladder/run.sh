#!/bin/bash
# Ingest on an H200 host: (1) the receiving thread's CPU per Gbit at one offered rate per size, the
# deployed ring (32 slots, 16 receive buffers) against a ring and buffer set that fit a core's L2
# (16 slots, 8 buffers), same binary, five trials each; (2) the comparison's ladder against spead2,
# both receivers and both senders pinned, as in bench/results/ingest-compare-h200-2026-11-28/.
set -u
mkdir -p /tmp/fl /tmp/sp && tar -xJf $BUNDLE/bin1.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/spead2.tar.xz -C /tmp/sp && SPEAD2_BUNDLE=/tmp/sp/spead2
B=/tmp/fl/bin
R=/tmp/ingest18; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA'; } > $R/machine.txt 2>&1
T0=$(date +%s)
CORES=()
declare -A SEEN
for c in $(seq 0 $(($(nproc) - 1))); do
  sib=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)
  [ -n "${SEEN[$sib]:-}" ] && continue
  SEEN[$sib]=1
  case ",$sib," in *,0,*|,0-*) continue;; esac
  CORES+=($c)
done
RX=${CORES[0]}; RES=${CORES[1]}; LOOP=${CORES[2]}; SEND="${CORES[3]},${CORES[4]}"
echo "receiver $RX, result $RES, loop $LOOP, senders $SEND" | tee -a $R/summary.txt
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
for sz in "1472 24" "8972 32"; do
  set -- $sz
  timeout 150 python3 bench/ingest_compare.py --sender-cpus $SEND --frameloop $B/frameloop --frameloop-base $B/frameloop \
    --frameloop-base-slots 16 --frameloop-base-ingest-extra 'batch = 8' --frameloop-catch-up 1.05 --frameloop-base-catch-up 1.05 \
    --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps $2 --max-gbps $2 --bisect-steps 0 --repeats 5 \
    --tools frameloop-cuda,frameloop-base-cuda --sizes $1 --out $R/fixed-$1.txt > $R/fixed-$1.stdout 2>&1
  echo "fixed $1 at $2 Gb/s rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
  python3 - $R/fixed-$1.txt <<'PY' | tee -a $R/summary.txt
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
done
left=$((580 - ($(date +%s) - T0)))
timeout $left python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -6 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-cuda) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
cat $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/ingest18.tar.xz ingest18
