#!/bin/bash
# The 8 KiB bench with the builds before and after the division-free bookkeeping, taking turns; then the comparison's ladder once more with both receivers pinned (the after build).
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/third; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3'; } > $R/machine.txt 2>&1
T0=$(date +%s)
for v in before after before after; do
  n=1; while [ -f $R/8k-$v-$n.txt ]; do n=$((n + 1)); done
  bin=frameloop; [ $v = before ] && bin=frameloop-before
  timeout 60 $B/$bin bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$v-$n.txt 2>&1
  echo "8k $v-$n rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k-$v-$n.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" >> $R/summary.txt
done
PIN='[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11'
s=$(date +%s)
timeout $((470 - (s - T0))) python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --spead2-cpus 3,7 --frameloop $B/frameloop --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --repeats 3 --tools spead2,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -6 $R/compare.stdout >> $R/summary.txt
cp $R/summary.txt $OUT/
xz -9 $R/compare.txt
cd /tmp && tar -czf $OUT/third.tgz third
