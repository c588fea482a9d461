#!/usr/bin/env bash
# Checks of the merged tree: every GPU test, the PyTorch consumer (slot views, 10k),
# 8 KiB compare, large-frame paths at 768 KiB (image) and 2 MiB.
set -u
mkdir -p /tmp/b target/release
tar -xJf "$BUNDLE" -C /tmp/b
cp /tmp/b/frameloop target/release/
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
export RUST_BACKTRACE=1
python3 -m pip install -q --no-deps --no-index /tmp/b/*.whl 2>&1 | tail -2
R=$OUT/f1; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version,pci.link.gen.max,pci.link.width.max --format=csv > $R/device.txt 2>&1
for t in gpu_kernels_compile gpu_ops gpu_resident gpu_streaming gpu_reload gpu_output gpu_loops gpu_builder gpu_user_kernels gpu_user_handler gpu_user_kernel_fault gpu_fault gpu_fault_fused gpu_fft gpu_wire; do
  [ -x /tmp/b/$t ] || continue
  s=$(date +%s)
  timeout -k 5 150 /tmp/b/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
VARIANTS="spin-slot-views" bench/output/hold_variants.sh $R/hold-10k 10000 1000 > $R/hold.log 2>&1; echo "hold rc=$?" | tee -a $R/summary.txt
cat $R/hold-10k/summary.txt
target/release/frameloop bench --backend cuda --compare --frames 10000 > $R/compare-8k.txt 2>&1; echo "compare-8k rc=$?" | tee -a $R/summary.txt
grep -E 'fused chain|MISSED|met\]' $R/compare-8k.txt | head -8
target/release/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/compare-768k.txt 2>&1; echo "compare-768k rc=$?" | tee -a $R/summary.txt
target/release/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 2097152 > $R/compare-2mib.txt 2>&1; echo "compare-2mib rc=$?" | tee -a $R/summary.txt
grep -E 'target|x\)' $R/compare-768k.txt $R/compare-2mib.txt | head -12
cd $OUT && tar -czf f1.tgz f1 && rm -rf f1
