#!/bin/bash
# What the receiving thread runs in the windows between the receive call that completed a 768 KiB
# frame and its publication: perf cpu-clock samples (CLOCK_REALTIME timestamps) of the appliance
# beside per-frame records (the experiment build: publication's wall time in sender_ts_ns).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fx && tar -xJf $BUNDLE/bin-experiment.tar.xz -C /tmp/fx && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fx
X=/tmp/fx/bin/frameloop
cat > /tmp/fx/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fx/perf/lib exec /tmp/fx/perf/perf "$@"
W
chmod +x /tmp/fx/perfw; P=/tmp/fx/perfw
R=/tmp/prof; rm -rf $R; mkdir -p $R
$P --version > $R/machine.txt 2>&1; cat /proc/sys/kernel/perf_event_paranoid /proc/sys/kernel/perf_event_max_sample_rate >> $R/machine.txt
for round in 1 2 3 4 5 6; do
  left=$((240 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && break
  if [ $((round % 2)) = 1 ]; then export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4; mode=pinned; else unset SERVICE_EXTRA SEND_CPUS; mode=free; fi
  d=$R/r$round-$mode; mkdir -p $d
  ( FL_EXPERIMENT_RECORDS=$d/rec-768k.txt OUT=$d CASES="image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$X timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1 ) &
  bg=$!
  pid=""
  for i in $(seq 1 200); do pid=$(pgrep -f "$X run" | head -1); [ -n "$pid" ] && break; sleep 0.05; done
  sleep 0.8
  $P record -e cpu-clock -F 20000 -k CLOCK_REALTIME -p $pid -o $d/perf.data -- sleep 3.5 > $d/perf.log 2>&1
  wait $bg
  $P script -i $d/perf.data -F comm,tid,time,ip,sym,dso 2>/dev/null | grep -E "^ *frameloop-rx " > $d/rx-samples.txt
  $P report -i $d/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $d/comms.txt
  rm -f $d/perf.data
  echo "round $round $mode pid=$pid samples $(wc -l < $d/rx-samples.txt) $(grep -E '^last_rx_to_seen ' $d/image-768k-on/run.txt | head -1)" | tee -a $R/summary.txt
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/prof.tar.xz prof
