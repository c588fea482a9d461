#!/bin/bash
# tail-read probe, streamed bench with GRO-sized and datagram-sized parts, every GPU test.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin; fl=$B/frameloop
mkdir -p target/release && cp $fl target/release/
R=$OUT/r52; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
nvcc -O2 -arch=sm_90 -Xcompiler -mclwb,-mclflushopt -o /tmp/tail_read bench/zc/tail_read.cu > $R/build.txt 2>&1 || cat $R/build.txt
for args in "65536 0" "65536 11" "8960 0" "262144 0" "65536 0"; do
  echo "== tail_read $args" >> $R/tail_read.txt; timeout 60 /tmp/tail_read $args 400 >> $R/tail_read.txt 2>&1
done
gcc -O2 -mclwb -mclflushopt -o /tmp/host_write_back bench/zc/host_write_back.c && for p in 8960 65536 262144; do /tmp/host_write_back $p; done > $R/host_write_back.txt 2>&1
cat $R/tail_read.txt $R/host_write_back.txt
n=0
for part in 65536 8924 65536 8924; do
  n=$((n+1))
  FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml --stream-part-bytes $part > $R/768k-part$part-$n.txt 2>&1; echo "768k part $part rc=$?"
  FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 --stream-part-bytes $part > $R/2m-part$part-$n.txt 2>&1; echo "2m part $part rc=$?"
done
for t in gpu_stream_watch gpu_streaming gpu_resident gpu_ops gpu_wire gpu_loops gpu_output gpu_reload gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 170 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head -20
cd $OUT && tar -czf r52.tgz r52 && rm -rf r52
