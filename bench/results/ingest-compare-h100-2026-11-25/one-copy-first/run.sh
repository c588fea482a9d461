#!/bin/bash
# Ingest comparison and frameloop bench on the GPU machine; results in $OUT.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=/tmp/x; R=/tmp/res; mkdir -p $R $X
tar -xJf .carry/lead/ingest.tar.xz -C $X
cp bench/ingest_compare.py $X/
cd $X
{ date -u; nproc; uname -r; nvidia-smi -L; sysctl net.core.rmem_max net.core.wmem_max; cat /proc/loadavg; } > $R/machine.txt 2>&1
for k in net.core.rmem_max net.core.wmem_max; do [ "$(sysctl -n $k)" -lt 4194304 ] && sysctl -w $k=4194304 >> $R/machine.txt 2>&1; done
for i in 1 2; do for b in base new; do
  timeout 25 ./frameloop-$b bench --backend cuda --frame-bytes 8192 --duration 3 > $R/bench-cuda-8k-$b-$i.txt 2>&1
  echo "rc=$?" >> $R/bench-cuda-8k-$b-$i.txt
  grep -E 'end to end|e2e|p50' $R/bench-cuda-8k-$b-$i.txt | tail -2 | sed "s/^/$b-$i: /"
done; done
common="--spead2-bin $X/spead2/bin --frameloop $X/frameloop-new --trial-s 2 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 3"
for size in 8972 1472; do
  timeout 250 python3 ingest_compare.py $common --tools spead2,frameloop-copy-cuda,frameloop-cuda,frameloop-host --sizes $size --out $R/compare-$size.txt > $R/compare-$size.stdout 2>&1
  echo "rc=$?" >> $R/compare-$size.stdout
  tail -7 $R/compare-$size.stdout
done
cat /proc/loadavg >> $R/machine.txt
tar -czf $OUT/res.tar.gz -C $R .
cp $R/compare-*.stdout $R/machine.txt $OUT/ 2>/dev/null
