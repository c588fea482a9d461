#!/bin/bash
# Runs on the GPU machine from the repository root.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
B=/tmp/h16b/bin
R=$OUT/reload-banks
mkdir -p $R target/release
cp $B/frameloop target/release/frameloop
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $R/device.txt 2>&1
t0=$(date +%s)
timeout 120 $B/gpu_reload --include-ignored --test-threads=1 --nocapture > $R/gpu_reload.txt 2>&1; echo "rc=$? $(( $(date +%s)-t0 ))s" >> $R/gpu_reload.txt
timeout 90 $B/reload_bench 10000 10 $R/reload_banks.json > $R/reload_bench.txt 2>&1; echo "rc=$?" >> $R/reload_bench.txt
timeout 60 target/release/frameloop bench --backend cuda --compare --frames 10000 > $R/bench_compare.txt 2>&1; echo "rc=$?" >> $R/bench_compare.txt
: > $OUT/regress.txt
for t in gpu_kernels_compile gpu_resident gpu_fault_fused gpu_ops gpu_output gpu_user_handler gpu_streaming gpu_loops; do
  t1=$(date +%s); timeout 30 $B/$t --include-ignored --test-threads=1 > $OUT/$t.log 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s)-t1 ))s $(grep -E '^test result' $OUT/$t.log | tail -1)" >> $OUT/regress.txt
  grep -E "FAILED|panicked" $OUT/$t.log | head -20 >> $OUT/regress.txt
done
tar -czf $OUT/logs.tgz -C $OUT $(cd $OUT && ls *.log) && rm -f $OUT/*.log
