#!/bin/bash
# gpu_streaming twice; UDP ingest against spead2 with the catching-up sender, plain and with a real-time receiving thread; wire rounds.
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r21; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for n in 1 2; do
  timeout -k 5 120 $B/gpu_streaming --include-ignored --test-threads=1 --nocapture > $R/streaming-$n.txt 2>&1
  echo "streaming-$n rc=$? $(grep -E '^test result' $R/streaming-$n.txt | tail -1)" | tee -a $R/summary.txt
done
(
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
  timeout 330 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop \
    --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-cuda,frameloop-rt-cuda --sizes 8972,1472 \
    --out $R/compare.txt > $R/compare.stdout 2>&1; echo "ingest compare rc=$? $(( $(date +%s) - T0 ))s" | tee -a $R/summary.txt
)
tail -9 $R/compare.txt | tee -a $R/summary.txt
for n in 1 2 3 4 5 6 7 8 9 10; do
  left=$((560 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && break
  d=$R/wire-$n
  OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout $((left - 3)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on; do
    echo "wire $n $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt 2>/dev/null | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf r21.tgz r21 && rm -rf r21
