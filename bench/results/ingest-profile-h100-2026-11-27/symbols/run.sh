#!/bin/bash
# Profiles (perf, cpu-clock) of frameloop's receiving thread with symbols on a GPU host: CUDA backend (32 slots), 1,472 and 8,972 B at 16 Gb/s.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl && tar -xJf $BUNDLE/perf.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r33; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
cat > /tmp/fl/perfw <<'W'
#!/bin/bash
LD_LIBRARY_PATH=/tmp/fl/perf/lib exec /tmp/fl/perf/perf "$@"
W
chmod +x /tmp/fl/perfw
P=/tmp/fl/perfw
for size in 1472 8972; do
  for be in cuda:32; do
    n=${be%%:*}; sl=${be##*:}
    D=$R/fl-$n-$size
    OUT=$D BACKEND=$n SLOTS=$sl PERF=$P PERF_EVENT=cpu-clock timeout 60 bash bench/ingest_profile.sh $B/frameloop $size 16 4 > $D.txt 2>&1
    $P report -i $D/perf.data --comm frameloop-rx --no-children --sort dso,sym --stdio 2>/dev/null | grep -E "^ +[0-9]" | head -60 > $D-syms.txt
    $P report -i $D/perf.data --comm frameloop-rx --no-children --sort sym --stdio -G 2>/dev/null | head -400 > $D-callers.txt
    $P annotate -i $D/perf.data --stdio -s frameloop::ingest::reassembly::Reassembler::on_datagram_at 2>/dev/null | grep -E "^\s+[0-9]+\.[0-9]+ :" | sort -rn | head -30 > $D-annot.txt
    rm -f $D/perf.data $D/rx-samples.txt
  done
done
cd $R && tar -czf ../r33.tgz . && cd .. && rm -rf r33
