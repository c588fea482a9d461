#!/bin/bash
# The acquire-release tickets on an H100: streamed 768 KiB and 2 MiB (one datagram and 64 KiB per receive batch) and the GPU tests that run multi-block kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r57; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; grep -m1 "model name" /proc/cpuinfo; } > $R/machine.txt 2>&1
c768="--frame-bytes 786432 --config bench/configs/image-u12.toml"
run() { # NAME BIN PART SIZEARGS...
  local name=$1 bin=$2 part=$3; shift 3
  timeout 100 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes $part "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(grep -E '^resident poll, streamed, (tiled fused kernel|graph IF body) ' $R/$name.txt | awk '{print $4,"p50",$(NF-8),"gpu",$(NF-1)}' | tr '\n' ' ') $(grep "streamed auto's gpu p50" $R/$name.txt | sed 's/.*(//')" | tee -a $R/summary.txt
}
for i in 1 2; do
  run 768k-d-new-$i frameloop 8924 $c768
  run 768k-d-base-$i frameloop-base 8924 $c768
done
run 768k-g-new frameloop 65536 $c768
run 2m-d-new frameloop 8924 --frame-bytes 2097152
for t in gpu_stream_watch gpu_streaming gpu_resident gpu_ops gpu_wire gpu_loops gpu_output gpu_reload gpu_fft; do
  s=$(date +%s)
  timeout -k 5 170 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/*.txt | grep -v "result thread panicked" | head -20
cd $OUT && tar -czf r57.tgz r57 && rm -rf r57
