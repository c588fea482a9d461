#!/bin/bash
# The tiled kernel's per-frame loads hoisted (new) against the build before (base): streamed 768 KiB and 2 MiB, with and without phase marks; 8 KiB; the tiled kernel's GPU tests.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r53; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
c768="--frame-bytes 786432 --config bench/configs/image-u12.toml"
run() { # NAME BIN PHASES PART SIZEARGS...
  local name=$1 bin=$2 ph=$3 part=$4; shift 4
  if [ "$ph" = 1 ]; then export FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES; else unset FRAMELOOP_NVRTC_DEFINES; fi
  timeout 120 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $part "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^resident poll, streamed, tiled fused kernel ' $R/$name.txt | awk '{print "p50",$7,"gpu",$(NF-1)}')" | tee -a $R/summary.txt
}
run 768k-d-base-1 frameloop-base 0 8924 $c768
run 768k-d-new-1 frameloop 0 8924 $c768
run 768k-d-base-2 frameloop-base 0 8924 $c768
run 768k-d-new-2 frameloop 0 8924 $c768
run 768k-d-new-phases frameloop 1 8924 $c768
run 768k-g-base frameloop-base 0 65536 $c768
run 768k-g-new frameloop 0 65536 $c768
run 2m-d-new frameloop 0 8924 --frame-bytes 2097152
run 2m-d-base frameloop-base 0 8924 --frame-bytes 2097152
unset FRAMELOOP_NVRTC_DEFINES
timeout 150 $B/frameloop bench --backend cuda --compare --frames 4000 --frame-bytes 8192 > $R/8k-new.txt 2>&1; echo "8k rc=$?"
grep -E "^\[" $R/8k-new.txt | head -4
for t in gpu_stream_watch gpu_streaming gpu_resident gpu_ops gpu_reload gpu_loops gpu_user_kernels gpu_builder gpu_kernels_compile; do
  s=$(date +%s)
  timeout -k 5 170 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head -20
cd $OUT && tar -czf r53.tgz r53 && rm -rf r53
