#!/bin/bash
# Ingest comparison and frameloop bench on the GPU machine; results in $OUT.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
X=/tmp/x; R=/tmp/res; mkdir -p $R
cd $X
{ date -u; nproc; uname -r; nvidia-smi -L; sysctl net.core.rmem_max net.core.wmem_max; cat /proc/loadavg; } > $R/machine.txt 2>&1
for k in net.core.rmem_max net.core.wmem_max; do [ "$(sysctl -n $k)" -lt 4194304 ] && sysctl -w $k=4194304 >> $R/machine.txt 2>&1; done
# frameloop bench at 8 KiB, CUDA backend, before/after alternating, in this one run
for i in 1 2; do for b in base new; do
  timeout 25 ./frameloop-$b bench --backend cuda --frame-bytes 8192 --duration 3 > $R/bench-cuda-8k-$b-$i.txt 2>&1
  echo "rc=$?" >> $R/bench-cuda-8k-$b-$i.txt
done; done
common="--spead2-bin $X/spead2/bin --frameloop $X/frameloop-new --frameloop-base $X/frameloop-base --trial-s 1 --frameloop-slack-s 2.5 --start-gbps 4 --bisect-steps 1"
timeout 130 python3 ingest_compare.py $common --tools spead2,frameloop-base-cuda,frameloop-cuda,frameloop-host --sizes 8972 --out $R/compare-8972.txt > $R/compare-8972.stdout 2>&1
echo "rc=$?" >> $R/compare-8972.stdout
timeout 110 python3 ingest_compare.py $common --tools spead2,frameloop-cuda,frameloop-host --sizes 1472 --out $R/compare-1472.txt > $R/compare-1472.stdout 2>&1
echo "rc=$?" >> $R/compare-1472.stdout
cat /proc/loadavg >> $R/machine.txt
tar -czf $OUT/res.tar.gz -C $R .
cp $R/compare-*.stdout $R/machine.txt $OUT/ 2>/dev/null
