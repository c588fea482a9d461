#!/bin/bash
# Experiment: block 0's and the tail block's own step durations in a streamed tiled frame; code size of the kernels.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r65; mkdir -p $R
export XDG_CACHE_HOME=/tmp/flcache
IMG="--config bench/configs/image-u12.toml"
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 786432 $IMG > $R/768k-d-phases.txt 2>&1
FRAMELOOP_NVRTC_DEFINES=FL_TILED_PHASES timeout 100 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --stream-part-bytes 8924 --frame-bytes 2097152 > $R/2m-d-phases.txt 2>&1
grep -h "phases of resident poll, streamed" $R/*-phases.txt | tee -a $R/summary.txt
ls -la /tmp/flcache/frameloop/ > $R/cache.txt 2>&1
for f in /tmp/flcache/frameloop/*; do echo "== $f"; /usr/local/cuda/bin/cuobjdump -elf $f 2>&1 | grep -E "\.text\.fl_(fused_tiled|fused_chain|ring_ready)" ; done > $R/elf.txt 2>&1
cat $R/elf.txt | head -30 | tee -a $R/summary.txt
for f in /tmp/flcache/frameloop/*; do /usr/local/cuda/bin/cuobjdump -sass $f 2>/dev/null | awk '/Function : fl_fused_tiled_loop/{p=1} p&&/Function : /&&!/fl_fused_tiled_loop/{p=0} p' ; done > $R/tiled_loop.sass 2>&1
wc -l $R/tiled_loop.sass | tee -a $R/summary.txt
cd $OUT && tar -czf r65.tgz r65 && rm -rf r65
