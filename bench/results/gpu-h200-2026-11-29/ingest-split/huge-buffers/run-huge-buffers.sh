#!/bin/bash
# The receive buffers in 2 MiB huge pages (bin/) against the build before (base/), on an H200
# host: fixed-rate trials, three a tool, one thread and two (ingest.assembly_thread), CUDA
# backend, pinned as in ../run-split.sh; what to compare is the receiving thread's CPU per Gbit.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
R=/tmp/hugebufs; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3';
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled)"; } > $R/machine.txt 2>&1
PIN="[service]\nreceiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3\nassembly_cpu = 6"
timeout ${BUDGET_S:-300} python3 bench/ingest_compare.py --frameloop /tmp/fl/bin/frameloop --frameloop-base /tmp/fl/base/frameloop \
  --sender-cpus 4,5 --frameloop-catch-up 1.05 --frameloop-config-extra "$PIN" \
  --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 24 --max-gbps 24 --bisect-steps 0 --repeats 3 \
  --tools frameloop-split-cuda,frameloop-base-split-cuda,frameloop-cuda,frameloop-base-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "rc=$?" >> $R/summary.txt
python3 - $R/compare.txt >> $R/summary.txt <<'PY'
import re, sys
print("tool size Gb/s clean rx_thread_cpu_s_per_gbit rx_thread_sys_cpu_s_per_gbit asm_thread_cpu_s_per_gbit")
for line in open(sys.argv[1]):
    m = re.match(r'# (frameloop[a-z-]*) (\d+) B offered ([0-9.]+) Gb/s: (clean|LOSS) ', line)
    if not m: continue
    g = lambda k: (re.search(r'"%s": ([0-9.e-]+|null)' % k, line) or [None, "-"])[1][:6]
    print(*m.groups(), g("rx_thread_cpu_s_per_gbit"), g("rx_thread_sys_cpu_s_per_gbit"), g("asm_thread_cpu_s_per_gbit"))
PY
cat $R/summary.txt
cp $R/summary.txt $R/machine.txt $OUT/
cd /tmp && XZ_OPT=-T0 tar -cJf $OUT/hugebufs.tar.xz hugebufs
