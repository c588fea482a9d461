#!/bin/bash
# Whole-grid tail copy of a claimed streamed frame (on top of the pull watch): GPU tests of the streaming paths,
# then bench --compare with phase marks (768 KiB image, 2 MiB) base / watch / new interleaved, and the 25 Gb/s wire runs.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/
R=$OUT/r43; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
for t in gpu_streaming gpu_resident gpu_wire gpu_reload gpu_loops; do
  s=$(date +%s)
  timeout -k 5 150 $B/$t --include-ignored --test-threads=1 > $R/$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/$t.txt | tail -1)" | tee -a $R/summary.txt
done
grep -E "FAILED|panicked" $R/gpu_*.txt | head -20
cmp() {  # cmp NAME BIN ARGS...
  local name=$1 bin=$2; shift 2
  local s=$(date +%s)
  XDG_CACHE_HOME=/tmp/cache-$bin FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 150 $B/$bin bench --backend cuda --compare --paths-only --frames 2000 "$@" > $R/$name.txt 2>&1
  echo "$name rc=$? $(( $(date +%s) - s ))s" | tee -a $R/summary.txt
}
for round in 1 2; do
  for v in base watch new; do
    bin=frameloop-$v; [ $v = new ] && bin=frameloop
    cmp 768k-$v-$round $bin --frame-bytes 786432 --config bench/configs/image-u12.toml
    cmp 2m-$v-$round $bin --frame-bytes 2097152
  done
done
for f in $R/7*.txt $R/2m*.txt; do echo "== $(basename $f)"; grep -E "^resident poll, streamed, tiled|^phases of resident poll, streamed|streamed auto" $f | cut -c1-170; done
for v in base watch new; do
  bin=frameloop-$v; [ $v = new ] && bin=frameloop
  s=$(date +%s)
  OUT=$R/link25-$v LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B/$bin timeout 150 bench/streaming/run.sh > $R/link25-$v.log 2>&1
  echo "wire $v rc=$? $(( $(date +%s) - s ))s"; cut -c1-110 $R/link25-$v/summary.txt
done
cd $OUT && tar -czf r43.tgz r43 && rm -rf r43
