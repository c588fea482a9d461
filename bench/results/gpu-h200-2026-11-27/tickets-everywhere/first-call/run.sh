#!/bin/bash
# Acquire-release tickets in every multi-block kernel (new) against the tiled-only change (base); wire to result at a 25 Gb/s pace; every GPU test.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r55; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
c768="--frame-bytes 786432 --config bench/configs/image-u12.toml"
run() { # NAME BIN PART SIZEARGS...
  local name=$1 bin=$2 part=$3; shift 3
  timeout 120 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $part "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^resident poll, streamed, (tiled fused kernel|graph IF body) ' $R/$name.txt | awk '{print $4,"p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
}
run 768k-d-base frameloop-base 8924 $c768
run 768k-d-new frameloop 8924 $c768
run 2m-d-base frameloop-base 8924 --frame-bytes 2097152
run 2m-d-new frameloop 8924 --frame-bytes 2097152
OUT=$R/wire LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/frameloop timeout 200 bash bench/streaming/run.sh > $R/wire.log 2>&1; echo "wire rc=$?"
cat $R/wire/summary.txt
for t in gpu_stream_watch gpu_streaming gpu_resident gpu_ops gpu_wire gpu_loops gpu_output gpu_reload gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 170 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head -20
cd $OUT && tar -czf r55.tgz r55 && rm -rf r55
