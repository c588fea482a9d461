#!/bin/bash
# Wire to result and bench --compare at the end of the round's tiled kernel work, alternating with the build it started from (4dee183).
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r69; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
for round in 1 2; do
  for v in new start; do
    bin=$B/frameloop; [ $v = start ] && bin=$B/frameloop-base
    d=$R/wire-$v-$round
    OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 80 bash bench/streaming/run.sh > /dev/null 2>&1
    for c in small-8k image-768k-on default-2m-on; do
      echo "$v round $round $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
    done
  done
done
cmp() { # name binary part bytes config
  timeout 100 $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
cmp 768k-d-new $B/frameloop 8924 786432 "$IMG"
cmp 768k-d-start $B/frameloop-base 8924 786432 "$IMG"
cmp 768k-g-new $B/frameloop 65536 786432 "$IMG"
cmp 768k-g-start $B/frameloop-base 65536 786432 "$IMG"
cmp 2m-d-new $B/frameloop 8924 2097152 ""
timeout 100 $B/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 8192 > $R/8k-new.txt 2>&1
grep -E "^(resident|\[)" $R/8k-new.txt | head -12 | tee -a $R/summary.txt
cd $OUT && tar -czf r69.tgz r69 && rm -rf r69
