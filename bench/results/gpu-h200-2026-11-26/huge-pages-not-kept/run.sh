#!/bin/bash
# Mapped host memory on transparent huge pages (FRAMELOOP_HUGE_PAGES) against cuMemHostAlloc: bench --compare
# with phase marks at 768 KiB (image) and 2 MiB, alternating, twice; then the 25 Gb/s wire run both ways.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
fl=/tmp/fl/bin/frameloop
R=$OUT/r46; mkdir -p $R
nvidia-smi --query-gpu=name,driver_version --format=csv > $R/gpu.txt 2>&1
{ cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag; grep -i huge /proc/meminfo; } > $R/thp.txt 2>&1
export FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES
for round in 1 2; do
  for v in plain huge; do
    if [ $v = huge ]; then export FRAMELOOP_HUGE_PAGES=1; else unset FRAMELOOP_HUGE_PAGES; fi
    timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 786432 --config bench/configs/image-u12.toml > $R/768k-$v-$round.txt 2>&1 &
    p=$!; sleep 6; grep -i AnonHuge /proc/meminfo >> $R/thp-during-$v.txt; wait $p; echo "768k $v rc=$?"
    timeout 150 $fl bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 2097152 > $R/2m-$v-$round.txt 2>&1; echo "2m $v rc=$?"
  done
done
unset FRAMELOOP_HUGE_PAGES FRAMELOOP_NVRTC_DEFINES
cat $R/thp.txt $R/thp-during-*.txt
for f in $R/7*.txt $R/2m*.txt; do echo "== $(basename $f)"; grep -E "^resident poll, streamed, tiled|^resident poll, tiled|^phases of resident poll, (streamed, )?tiled|host.device|device memory" $f | cut -c1-230; done
for v in plain huge; do
  if [ $v = huge ]; then export FRAMELOOP_HUGE_PAGES=1; else unset FRAMELOOP_HUGE_PAGES; fi
  OUT=$R/link25-$v LINK_GBPS=25 INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$fl timeout 150 bench/streaming/run.sh > $R/link25-$v.log 2>&1
  echo "wire $v rc=$?"; cut -c1-100 $R/link25-$v/summary.txt
done
cd $OUT && tar -czf r46.tgz r46 && rm -rf r46
