#!/bin/bash
# The datagram counts added once per receive buffer (frameloop) against once per datagram (frameloop-base): receiving-thread profiles alternating, then the comparison with spead2 (both senders at catch-up 1.05).
set -u
T0=$(date +%s)
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
B=/tmp/fl/bin
mkdir -p target/release && cp $B/frameloop target/release/frameloop
R=$OUT/r35; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$SPEAD2_BUNDLE/lib
cat > /tmp/fl/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"
W
chmod +x /tmp/fl/perfw
{ nvidia-smi --query-gpu=name,driver_version --format=csv; nproc; uname -r; } > $R/machine.txt 2>&1
for size in 1472 1472 8972; do
  for v in base new; do
    bin=$B/frameloop; [ $v = base ] && bin=$B/frameloop-base
    n=1; while [ -d $R/prof-$v-$size-$n ]; do n=$((n + 1)); done
    D=$R/prof-$v-$size-$n
    OUT=$D BACKEND=cuda SLOTS=32 PERF=/tmp/fl/perfw PERF_EVENT=cpu-clock timeout 60 bash bench/ingest_profile.sh $bin $size 16 4 > $D.txt 2>&1
    rm -f $D/perf.data $D/rx-samples.txt
    echo "profile $v $size #$n: $(grep 'receiving thread:' $D.txt | sed 's/.*: //')" >> $R/summary.txt
  done
done
echo "profiles done $(( $(date +%s) - T0 ))s" >> $R/summary.txt
s=$(date +%s)
timeout $((588 - (s - T0))) python3 bench/ingest_compare.py --spead2-bin $SPEAD2_BUNDLE/bin --frameloop $B/frameloop --frameloop-base $B/frameloop-base --frameloop-base-catch-up 1.05 --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2 --repeats 3 --tools spead2,frameloop-base-cuda,frameloop-cuda --sizes 1472,8972 --out $R/compare.txt > $R/compare.stdout 2>&1
echo "ingest compare rc=$? $(( $(date +%s) - s ))s" >> $R/summary.txt
tail -8 $R/compare.stdout >> $R/summary.txt
