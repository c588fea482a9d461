#!/bin/bash
# Where the receiving thread's time goes on a GPU host (perf, frameloop CUDA backend and spead2_recv at 1,472 B), then the comparison with the host and CUDA backends side by side and the kernel/user split of CPU time.
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r30; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
PERF="env LD_LIBRARY_PATH=/tmp/fl/perf/lib /tmp/fl/perf/perf"
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; $PERF --version; id; cat /proc/sys/kernel/kptr_restrict; } > $R/machine.txt 2>&1
# frameloop, CUDA backend, 32 slots, 1,472 B at 16 Gb/s (perf wrapper script: PERF must be one word)
cat > /tmp/fl/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"
W
chmod +x /tmp/fl/perfw
for size in 1472 8972; do
  OUT=$R/prof-fl-$size BACKEND=cuda SLOTS=32 PERF=/tmp/fl/perfw timeout 60 bash bench/ingest_profile.sh $B/frameloop $size 16 4 > $R/prof-fl-$size.txt 2>&1
  /tmp/fl/perfw report -i $R/prof-fl-$size/perf.data --comm frameloop-rx --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -40 > $R/prof-fl-$size-syms.txt
  rm -f $R/prof-fl-$size/perf.data $R/prof-fl-$size/rx-samples.txt
  # spead2_recv, the same traffic
  P=$R/prof-spead2-$size; mkdir -p $P
  $SPEAD2_BUNDLE/bin/spead2_recv --quiet --packet $size --buffer 4194304 127.0.0.1:8899 > $P/recv.txt 2>&1 &
  rp=$!; sleep 0.5
  /tmp/fl/perfw record -F 2999 -g -p $rp -o $P/perf.data -- sleep 5 > $P/perf.log 2>&1 &
  pp=$!; sleep 0.3
  $SPEAD2_BUNDLE/bin/spead2_send --packet $size --heap-size 65536 --heaps 122000 --rate 16 --buffer 4194304 127.0.0.1:8899 > $P/send.txt 2>&1
  wait $pp; wait $rp
  /tmp/fl/perfw report -i $P/perf.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -40 > $P/syms.txt
  /tmp/fl/perfw report -i $P/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $P/comms.txt
  rm -f $P/perf.data
done
echo "profiles done $(( $(date +%s) - T0 ))s" >> $R/summary.txt
s=$(date +%s)
timeout $((585 - (s - T0))) python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-host,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -8 $R/compare.stdout >> $R/summary.txt
