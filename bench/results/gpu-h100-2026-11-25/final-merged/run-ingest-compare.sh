#!/bin/bash
# Ingest comparison against spead2 on the GPU machine; results in $OUT.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=/tmp/x; R=/tmp/res; mkdir -p $R $X
tar -xJf "$SPEAD2_BUNDLE" -C $X
tar -xJf "$BUNDLE" -C $X ./frameloop
cp bench/ingest_compare.py $X/
cd $X
{ date -u; nproc; uname -r; nvidia-smi -L; sysctl net.core.rmem_max net.core.wmem_max; cat /proc/loadavg; } > $R/machine.txt 2>&1
for k in net.core.rmem_max net.core.wmem_max; do [ "$(sysctl -n $k)" -lt 4194304 ] && sysctl -w $k=4194304 >> $R/machine.txt 2>&1; done
common="--spead2-bin $X/spead2/bin --frameloop $X/frameloop --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 2"
for size in 8972 1472; do
  timeout 140 python3 ingest_compare.py $common --tools spead2,frameloop-copy-cuda,frameloop-cuda --sizes $size --out $R/compare-$size.txt > $R/compare-$size.stdout 2>&1
  echo "rc=$?" >> $R/compare-$size.stdout; tail -5 $R/compare-$size.stdout
done
cat /proc/loadavg >> $R/machine.txt
tar -czf $OUT/res.tar.gz -C $R .
