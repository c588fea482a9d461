#!/bin/bash
# Tiled filter quads + 32-bit indices (1dad0c5): every tiled/streaming GPU test, then wire and bench --compare against a0b497d.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/final; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; } > $R/machine.txt 2>&1
for t in gpu_ops gpu_stream_watch gpu_streaming gpu_resident gpu_fault_fused gpu_reload gpu_loops gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 200 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
for v in new base; do
  left=$((480 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  bin=$B/frameloop; [ $v = base ] && bin=$B/frameloop-base
  d=$R/wire-$v
  OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout $((left - 5)) bash bench/streaming/run.sh > /dev/null 2>&1
  for c in small-8k image-768k-on default-2m-on; do
    echo "wire $v $c $(grep -E "^(last_rx_to_seen|publish_to_detect|compute) " $d/$c/run.txt | sort -u | awk '{print $1, $2}' | tr '\n' ' ')" | tee -a $R/summary.txt
  done
done
cmp() { # name binary part bytes config
  left=$((565 - ($(date +%s) - T0)))
  [ $left -lt 25 ] && return
  timeout $((left - 3)) $2 bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $3 --frame-bytes $4 $5 > $R/$1.txt 2>&1
  echo "compare $1 rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$1.txt | awk '{print "p50",$(NF-8),"p99.9",$(NF-5),"gpu",$(NF-1)}') $(grep "streamed auto's gpu p50" $R/$1.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
IMG="--config bench/configs/image-u12.toml"
cmp 768k-d-new $B/frameloop 8924 786432 "$IMG"
cmp 768k-d-base $B/frameloop-base 8924 786432 "$IMG"
cmp 2m-d-new $B/frameloop 8924 2097152 ""
cmp 2m-d-base $B/frameloop-base 8924 2097152 ""
left=$((575 - ($(date +%s) - T0)))
[ $left -gt 25 ] && { timeout $((left - 3)) $B/frameloop bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-new.txt 2>&1; grep -E "^resident poll budget, auto|^\[" $R/8k-new.txt | head -4 | tee -a $R/summary.txt; }
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head
cd $OUT && tar -czf final.tgz final && rm -rf final
