#!/bin/bash
# The streamed 2 MiB case at 300 frames/s with the receiver's poll budget under the frame period
# (P2: ingest.poll_budget_us = 2000, the wire script's setting; the receiver waits in epoll for
# ~0.3 ms before each frame) and over it (P10: 10000, the receiver never waits), rounds
# alternating, each variant also running the 8 KiB case, datagrams paced at 25 Gb/s, threads
# pinned as deployed, frame logs and the busy_poll_gaps counter.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/budget; rm -rf $R; mkdir -p $R
timeout 40 $B/frameloop bench --backend cuda --compare --paths-only --frames 1000 --frame-bytes 8192 > $R/8k.txt 2>&1
grep -E "^floor: device memory" $R/8k.txt | tee -a $R/summary.txt
line() { grep -E "^(last_rx_to_seen|publish_to_detect|compute|done_to_seen) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s max %s  ", $1, $2, $5, $6}'; grep -E "^ +busy_poll_gaps" $1/$2/run.txt | head -1 | tr -s ' '; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-165} - ($(date +%s) - T0)))
  [ $left -lt 28 ] && break
  if [ $((round % 2)) = 1 ]; then order="P2 P10"; else order="P10 P2"; fi
  for v in $order; do
    d=$R/r$round-$v; mkdir -p $d
    budget=2000; [ $v = P10 ] && budget=10000
    CPU_STATS=1 FRAME_LOG=1 OUT=$d CASES="small-8k default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" \
      INGEST_EXTRA="poll_budget_us = $budget" FRAMELOOP=$B/frameloop timeout 40 bash bench/streaming/run.sh > $d/script.txt 2>&1
    for c in small-8k default-2m-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt $OUT/summary-live.txt; done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 $BUNDLE/analyze.py $R/8k.txt $R > $R/analysis.txt 2>&1
grep -A3 "^medians" $R/analysis.txt; grep -A2 "^streamed" $R/analysis.txt; grep -A3 "busy-poll gaps" $R/analysis.txt | cut -c1-400
cp $R/summary.txt $R/analysis.txt $R/8k.txt $OUT/
cd /tmp && for f in $(find budget -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
find budget -name frames.csv > /tmp/full.txt; XZ_OPT=-T0 tar -cJf $OUT/budget-full.tar.xz -T /tmp/full.txt
XZ_OPT=-T0 tar -cJf $OUT/budget-slim.tar.xz --exclude frames.csv budget
