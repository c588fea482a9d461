#!/bin/bash
# Profiles (perf, cpu-clock) of the receiving thread on a GPU host with the current build: CUDA backend (32 slots) with its threads pinned apart, and spead2_recv under taskset -c 3,7; 1,472 B at 20 Gb/s and 8,972 B at 28 Gb/s.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=/tmp/prof; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
cat > /tmp/fl/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"
W
chmod +x /tmp/fl/perfw
P=/tmp/fl/perfw
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3'; } > $R/machine.txt 2>&1
PIN='[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11'
for spec in 1472:20 8972:28; do
  size=${spec%%:*}; gbps=${spec##*:}
  D=$R/fl-cuda-$size
  OUT=$D BACKEND=cuda SLOTS=32 PERF=$P PERF_EVENT=cpu-clock CONFIG_EXTRA="$PIN" timeout 60 bash bench/ingest_profile.sh $B/frameloop $size $gbps 4 > $D.txt 2>&1
  $P report -i $D/perf.data --comm frameloop-rx --no-children --sort dso,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -60 > $D-syms.txt
  $P report -i $D/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $D-comms.txt
  rm -f $D/perf.data $D/rx-samples.txt
  D=$R/spead2-$size; mkdir -p $D
  heaps=$(python3 -c "print(int($gbps * 1e9 / 8 / 65536 * 4))")
  taskset -c 3,7 $SPEAD2_BUNDLE/bin/spead2_recv --quiet --packet $size --buffer 4194304 127.0.0.1:8899 > $D/recv.txt 2>&1 &
  rp=$!; sleep 0.5
  $P record -e cpu-clock -F 2999 -g -p $rp -o $D/perf.data -- sleep 5 > $D/perf.log 2>&1 &
  pp=$!; sleep 0.3
  $SPEAD2_BUNDLE/bin/spead2_send --packet $size --heap-size 65536 --heaps $heaps --rate $gbps --buffer 4194304 127.0.0.1:8899 > $D/send.txt 2>&1
  wait $pp; wait $rp
  $P report -i $D/perf.data --no-children --sort comm,dso,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -60 > $D-syms.txt
  $P report -i $D/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $D-comms.txt
  rm -f $D/perf.data
done
cp $R/fl-cuda-1472.txt $OUT/ 2>/dev/null
cd /tmp && tar -czf $OUT/prof.tgz prof
