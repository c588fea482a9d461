#!/bin/bash
# Nsight Compute on the tiled kernel (1dad0c5): the image chain and the default chain on 2 MiB + 6 byte frames, details with source counters and per-line SASS counts.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/tiled-ncu-stalls; mkdir -p $R
NCU=$(command -v ncu || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; echo "ncu: $NCU"; $NCU --version; } > $R/machine.txt 2>&1
cat $R/machine.txt
T=tiled_fused_chains_give_identical_bits_over_100_graph_launches
prof() { # name skip
  timeout 150 $NCU --kernel-name regex:fl_fused_tiled --launch-skip $2 --launch-count 1 --set full --import-source yes -f -o $R/$1 $B/gpu_ops $T --include-ignored > $R/$1-run.txt 2>&1
  echo "$1 rc=$? $(( $(date +%s) - T0 ))s"
  $NCU -i $R/$1.ncu-rep --page details > $R/$1-details.txt 2>&1
  $NCU -i $R/$1.ncu-rep --page source --csv --print-source sass > $R/$1-sass.csv 2>&1 || echo "sass page rc=$?"
  $NCU -i $R/$1.ncu-rep --page source --csv --print-source cuda > $R/$1-cuda.csv 2>&1 || echo "cuda page rc=$?"
  grep -E "Duration|Executed Ipc|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  " $R/$1-details.txt | head -8
}
prof image 111
prof default 5
ls -la $R
echo "elapsed $(( $(date +%s) - T0 ))"
cd $OUT && tar -czf tiled-ncu-stalls.tgz tiled-ncu-stalls && rm -rf tiled-ncu-stalls
