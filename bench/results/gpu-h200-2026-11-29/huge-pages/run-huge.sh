#!/bin/bash
# The frame ring in 2 MiB huge pages (ring.huge_pages) on an H200 host:
#  1. the kernel's copy of a datagram into a cold ring place, 4 KiB pages against huge pages (paced.c);
#  2. the UDP-to-GPU tests of this build (its frame ring now registered ring pages);
#  3. 8 KiB and 2 MiB bench --compare --paths-only, huge pages on and off (GPU reads of mapped memory);
#  4. rounds of the wire script (8 KiB, streamed 768 KiB, streamed 2 MiB; 25 Gb/s a datagram, no GSO),
#     taking turns: B = build a76ffc8 (before the cheaper busy-polling turn), O = this build with
#     ring.huge_pages = false, H = this build with huge pages.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/huge; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -E "Model name|NUMA|Thread|Hypervisor|L2|L3";
  echo "thp: $(cat /sys/kernel/mm/transparent_hugepage/enabled) defrag: $(cat /sys/kernel/mm/transparent_hugepage/defrag)"; } > $R/machine.txt 2>&1
cat $R/machine.txt
for i in 1 2 3; do for m in cold huge; do $B/paced $m 25 8972 1 4 2>>$R/kernel-copy.txt >> $R/kernel-copy.txt; done; done
cat $R/kernel-copy.txt
mkdir -p target/release && cp $B/frameloop target/release/frameloop
for t in gpu_wire gpu_streaming gpu_resident gpu_loops; do
  s=$(date +%s)
  timeout -k 5 90 $B/$t --include-ignored --test-threads=1 > $R/test-$t.txt 2>&1; rc=$?
  echo "$t rc=$rc $(( $(date +%s) - s ))s $(grep -E '^test result' $R/test-$t.txt | tail -1)" | tee -a $R/tests.txt
  grep -E "^test .*FAILED|panicked" $R/test-$t.txt | head -5 | tee -a $R/tests.txt
done
printf '[ring]\nhuge_pages = false\n' > $R/base-pages.toml
printf '[ring]\nhuge_pages = true\n' > $R/huge-pages.toml
timeout 60 $B/frameloop bench --backend cuda --compare --paths-only --frames 2000 --frame-bytes 8192 > $R/8k.txt 2>&1
echo "8k rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
for p in huge base; do
  timeout 90 $B/frameloop bench --backend cuda --compare --paths-only --frames 1000 --frame-bytes 2097152 --config $R/$p-pages.toml > $R/bench-2m-$p.txt 2>&1
  echo "2m $p rc=$? elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
done
line() { grep -E "^(last_rx_to_seen|assembly) " $1/$2/run.txt | sort -u | awk '{printf "%s %s p99.9 %s  ", $1, $2, $5}'; }
export SERVICE_EXTRA="receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3" SEND_CPUS=4
for round in $(seq 1 40); do
  left=$((${BUDGET_S:-545} - ($(date +%s) - T0)))
  [ $left -lt 55 ] && break
  for v in B O H; do
    d=$R/r$round-$v; mkdir -p $d
    bin=$B/frameloop; ring=""; [ $v = B ] && bin=$B/frameloop-base; [ $v = O ] && ring="huge_pages = false"
    CPU_STATS=1 FRAME_LOG=1 OUT=$d CASES="small-8k image-768k-on default-2m-on" LINK_GBPS=25 SEND_EXTRA="--gso off" \
      RING_EXTRA="$ring" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$bin timeout 80 bash bench/streaming/run.sh > $d/script.txt 2>&1
    for c in small-8k image-768k-on default-2m-on; do echo "wire $round $v $c $(line $d $c)" | tee -a $R/summary.txt; done
  done
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
python3 $BUNDLE/analyze.py $R/8k.txt $R > $R/analysis.txt 2>&1; head -30 $R/analysis.txt
cd /tmp && for f in $(find huge -name frames.csv); do awk -F, 'NR == 1 || ($13 - $9) > 50000' $f > ${f%frames.csv}frames-above-50us.csv; done
cp $R/summary.txt $R/analysis.txt $R/machine.txt $R/kernel-copy.txt $R/tests.txt $OUT/
XZ_OPT=-T0 tar -cJf $OUT/huge-slim.tar.xz --exclude frames.csv huge
find huge -name frames.csv | XZ_OPT=-T0 tar -cJf $OUT/huge-frames.tar.xz -T -
ls -la $OUT
