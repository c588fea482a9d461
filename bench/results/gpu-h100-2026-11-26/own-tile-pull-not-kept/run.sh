#!/bin/bash
# Blocks pull their own tile while they wait: GPU tests (all but gpu_ops), then bench --compare with phase marks
# (768 KiB image, 2 MiB) and the 25 Gb/s wire run.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin; fl=$B/frameloop
mkdir -p target/release && cp $fl target/release/
R=$OUT; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for t in gpu_resident gpu_streaming gpu_wire gpu_loops gpu_output gpu_reload gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 120 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | head -20
export XDG_CACHE_HOME=/tmp/cache-phases
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 120 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-phases.txt 2>&1; echo "768k rc=$?"
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 120 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2m-phases.txt 2>&1; echo "2m rc=$?"
unset XDG_CACHE_HOME
OUT=$R/link25-busy LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 120 bench/streaming/run.sh > $R/link25-busy.log 2>&1; echo "wire rc=$?"; cat $R/link25-busy/summary.txt
for f in 768k-phases 2m-phases; do echo "== $f"; grep -E "streamed|^phases|MISSED|met\]" $R/$f.txt | cut -c1-180; done
for c in small-8k image-768k-on default-2m-on; do echo "== $c"; grep -m4 -E "^(compute|publish_to_seen|last_rx)" $R/link25-busy/$c/run.txt; done

