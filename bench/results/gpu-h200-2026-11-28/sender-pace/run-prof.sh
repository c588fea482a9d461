#!/bin/bash
# Where the busy-polling receiving thread's time goes with streamed 2 MiB frames of 8,972-byte datagrams
# sent without GSO, paced at 25 Gb/s (a pace the sender cannot keep) and at 12 (one it keeps): perf
# (cpu-clock) of the appliance process for 3 s in the middle of each run, the frameloop-rx thread's
# samples by symbol and sorted by bench/ingest_profile.py. Build a76ffc8, threads pinned as deployed.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
printf '#!/bin/bash\nLD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"\n' > /tmp/fl/perfw; chmod +x /tmp/fl/perfw
P=/tmp/fl/perfw; B=/tmp/fl/bin
R=/tmp/prof; rm -rf $R; mkdir -p $R
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for gbps in 25 12 25 12; do
  d=$R/g$gbps-$RANDOM; mkdir -p $d
  OUT=$d CASES="default-2m-on" LINK_GBPS=$gbps SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" \
    FRAMELOOP=$B/frameloop timeout 80 bash bench/streaming/run.sh > $d/script.txt 2>&1 &
  sp=$!
  pid=""; for _ in $(seq 200); do pid=$(pgrep -f "frameloop run .*default-2m-on" | head -1); [ -n "$pid" ] && break; sleep 0.05; done
  sleep 1.0
  [ -n "$pid" ] && $P record -e cpu-clock -F 9999 -g -p $pid -o $d/perf.data -- sleep 3 > $d/perf.log 2>&1
  wait $sp
  $P report -i $d/perf.data --comm frameloop-rx --no-children --sort dso,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -70 > $d/rx-syms.txt
  $P report -i $d/perf.data --comm frameloop-rx --no-children --sort sym --stdio -G 2>/dev/null | head -400 > $d/rx-callers.txt
  $P script -i $d/perf.data --comm frameloop-rx -F tid,ip,sym > $d/rx-samples.txt 2>/dev/null
  # The 3 s window's datagrams, estimated: 300 frames/s of 236 datagrams (8,972 B, the last shorter).
  echo '{"window_estimate": {"datagrams": 212400, "frames_complete": 900, "bytes": 1897632000}}' > $d/window.json
  python3 bench/ingest_profile.py $d/rx-samples.txt 9999 $d/window.json > $d/breakdown.txt 2>&1
  grep -E "^(last_rx_to_seen|assembly) " $d/default-2m-on/run.txt | sort -u > $d/lat.txt
  echo "== $d"; cat $d/lat.txt; head -25 $d/rx-syms.txt; cat $d/breakdown.txt
  rm -f $d/perf.data $d/rx-samples.txt
done
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/prof.tar.xz --exclude frames.csv prof
