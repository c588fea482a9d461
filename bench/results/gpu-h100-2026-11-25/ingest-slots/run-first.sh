#!/bin/bash
# Ingest comparison on the GPU machine with a cache-sized ring (16 slots) and the old 256.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=/tmp/x; R=/tmp/res; mkdir -p $R $X
tar -xJf "$SPEAD2_BUNDLE" -C $X
tar -xJf "$BUNDLE" -C $X ./frameloop
cp bench/ingest_compare.py $X/
cd $X
{ date -u; nproc; uname -r; cat /proc/loadavg; } > $R/machine.txt 2>&1
for k in net.core.rmem_max net.core.wmem_max; do [ "$(sysctl -n $k)" -lt 4194304 ] && sysctl -w $k=4194304 >/dev/null 2>&1; done
common="--spead2-bin $X/spead2/bin --frameloop $X/frameloop --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 8 --bisect-steps 3"
for size in 1472 8972; do
  timeout 140 python3 ingest_compare.py $common --tools spead2,frameloop-cuda,frameloop-copy-cuda --frameloop-slots 16 --sizes $size --out $R/slots16-$size.txt > $R/slots16-$size.stdout 2>&1
  echo "rc=$?" >> $R/slots16-$size.stdout; tail -5 $R/slots16-$size.stdout
done
timeout 100 python3 ingest_compare.py $common --tools frameloop-cuda --frameloop-slots 256 --sizes 1472 --out $R/slots256-1472.txt > $R/slots256-1472.stdout 2>&1
echo "rc=$?" >> $R/slots256-1472.stdout; tail -3 $R/slots256-1472.stdout
rm -f $R/*.stdout
tar -czf $OUT/slots.tar.gz -C $R .
