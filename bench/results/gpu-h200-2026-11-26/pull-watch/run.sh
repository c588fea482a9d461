#!/bin/bash
# The poll ends for a pull as soon as the next frame has new words: bench --compare with phase marks
# (768 KiB image, 2 MiB) before/after, interleaved; the 25 Gb/s wire run before/after; then the GPU tests.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
PART=${PART:-bench}
R=$OUT/r42-$PART; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
cmp() {  # cmp NAME BIN ARGS...
  local name=$1 bin=$2; shift 2
  local s=$(date +%s)
  XDG_CACHE_HOME=/tmp/cache-$bin FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s) - s ))s" | tee -a $R/summary.txt
}
if [ $PART = bench ]; then
for round in 1 2; do
  cmp 768k-base-$round frameloop-base --frame-bytes 786432 --config bench/configs/image-u12.toml
  cmp 768k-new-$round frameloop --frame-bytes 786432 --config bench/configs/image-u12.toml
  cmp 2m-base-$round frameloop-base --frame-bytes 2097152
  cmp 2m-new-$round frameloop --frame-bytes 2097152
done
for f in 768k-base-1 768k-new-1 768k-base-2 768k-new-2 2m-base-1 2m-new-1 2m-base-2 2m-new-2; do echo "== $f"; grep -E "streamed|^phases" $R/$f.txt | cut -c1-200; done
for v in base new; do
  bin=frameloop; [ $v = base ] && bin=frameloop-base
  s=$(date +%s)
  OUT=$R/link25-$v LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/$bin timeout 150 bench/streaming/run.sh > $R/link25-$v.log 2>&1
  echo "wire $v rc=$? $(( $(date +%s) - s ))s"; cat $R/link25-$v/summary.txt
done
fi
if [ $PART = tests ]; then
for t in gpu_streaming gpu_resident gpu_ops gpu_wire gpu_loops gpu_output gpu_reload gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | head -20
fi
cd $OUT && tar -czf r42-$PART.tgz r42-$PART && rm -rf r42-$PART
