#!/bin/bash
# Final build: every GPU test binary, 8 KiB benches, and ingest against spead2 (before this round / final), interleaved.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r23; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
(nvidia-smi --query-gpu=name --format=csv,noheader; nproc; lscpu | grep "Model name") > $R/machine.txt
for t in gpu_kernels_compile gpu_ops gpu_resident gpu_streaming gpu_reload gpu_output gpu_loops gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_wire; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
timeout 60 target/release/frameloop bench --backend cuda --frame-bytes 8192 --rate 1000 --duration 5 > $R/loopback-8k.txt 2>&1; echo "loopback rc=$? $(grep -E '^(end_to_end|done_to_seen)' $R/loopback-8k.txt | tr -s ' ' | cut -d' ' -f1-6 | tr '\n' ' ')"
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
timeout 250 python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop target/release/frameloop --frameloop-base $B/frameloop-base \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 1472,8972 \
  --out $R/compare.txt > $R/compare.stdout 2>&1; echo "cmp rc=$?"; grep -E "^(spead2|frameloop)" $R/compare.txt | tail -6
cd $OUT && tar -czf r23.tgz r23 && rm -rf r23
