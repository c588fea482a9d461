#!/bin/bash
# Profiles (perf, cpu-clock) of the receiving thread on a GPU host: frameloop CUDA backend (32 slots), host backend (256 slots), spead2_recv; 16 Gb/s of 64 KiB frames.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r32; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
cat > /tmp/fl/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"
W
chmod +x /tmp/fl/perfw
P=/tmp/fl/perfw
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; cat /sys/devices/system/clocksource/clocksource0/current_clocksource; cat /sys/kernel/mm/transparent_hugepage/enabled; } > $R/machine.txt 2>&1
for size in 1472 8972; do
  for be in cuda:32 host:256; do
    n=${be%%:*}; sl=${be##*:}
    D=$R/fl-$n-$size
    OUT=$D BACKEND=$n SLOTS=$sl PERF=$P PERF_EVENT=cpu-clock timeout 60 bash bench/ingest_profile.sh $B/frameloop $size 16 4 > $D.txt 2>&1
    $P report -i $D/perf.data --comm frameloop-rx --no-children --sort sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -45 > $D-syms.txt
    $P report -i $D/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $D-comms.txt
    rm -f $D/perf.data $D/rx-samples.txt
  done
  D=$R/spead2-$size; mkdir -p $D
  $SPEAD2_BUNDLE/bin/spead2_recv --quiet --packet $size --buffer 4194304 127.0.0.1:8899 > $D/recv.txt 2>&1 &
  rp=$!; sleep 0.5
  $P record -e cpu-clock -F 2999 -g -p $rp -o $D/perf.data -- sleep 5 > $D/perf.log 2>&1 &
  pp=$!; sleep 0.3
  $SPEAD2_BUNDLE/bin/spead2_send --packet $size --heap-size 65536 --heaps 122000 --rate 16 --buffer 4194304 127.0.0.1:8899 > $D/send.txt 2>&1
  wait $pp; wait $rp
  $P report -i $D/perf.data --no-children --sort comm,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -50 > $D-syms.txt
  $P report -i $D/perf.data --no-children --sort comm --stdio 2>/dev/null | grep -E "^ +[0-9]" > $D-comms.txt
  rm -f $D/perf.data
done
cd $R && tar -czf ../r32.tgz . && cd .. && rm -rf r32
