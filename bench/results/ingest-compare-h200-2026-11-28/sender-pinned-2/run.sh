#!/bin/bash
# The comparison's ladder with both receivers pinned and both senders pinned to cores of their own
# (no core shared with a receiver thread, hyperthread siblings included), recording the scheduler's
# treatment of the receivers' threads in every trial.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/senderpinned; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA'; } > $R/machine.txt 2>&1
T0=$(date +%s)
# One CPU per physical core, in order, leaving out CPU 0's core (interrupts and housekeeping).
CORES=()
declare -A SEEN
for c in $(seq 0 $(($(nproc) - 1))); do
  sib=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)
  echo "cpu $c core $(cat /sys/devices/system/cpu/cpu$c/topology/core_id) siblings $sib" >> $R/machine.txt
  [ -n "${SEEN[$sib]:-}" ] && continue
  SEEN[$sib]=1
  case ",$sib," in *,0,*|,0-*) continue;; esac
  CORES+=($c)
done
RX=${CORES[0]}; RES=${CORES[1]}; LOOP=${CORES[2]}; SEND="${CORES[3]},${CORES[4]}"
echo "receiver $RX, result $RES, loop $LOOP, senders $SEND (one CPU of each core: ${CORES[*]})" | tee -a $R/summary.txt
PIN="[service]\nreceiver_cpu = $RX\nresult_cpu = $RES\nloop_cpu = $LOOP"
timeout 540 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus $RX,$RES --sender-cpus $SEND --frameloop $B/frameloop --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" >> $R/summary.txt
tail -6 $R/compare.stdout >> $R/summary.txt
grep -E "^# (spead2|frameloop-cuda) [0-9]+ B offered|^# scheduling" $R/compare.txt | cut -c1-420 > $R/trials.txt
cat $R/summary.txt
cp $R/summary.txt $R/trials.txt $OUT/
xz -9 $R/compare.txt
cd /tmp && tar -czf $OUT/senderpinned.tgz senderpinned
