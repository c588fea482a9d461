#!/bin/bash
# 1,472-byte datagrams: spead2 and frameloop with a 16-slot ring, then frameloop with 256 slots, three rounds.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
X=/tmp/x; R=/tmp/res2; mkdir -p $R $X
tar -xJf "$SPEAD2_BUNDLE" -C $X
tar -xJf "$BUNDLE" -C $X ./frameloop
cp bench/ingest_compare.py $X/
cd $X
for k in net.core.rmem_max net.core.wmem_max; do [ "$(sysctl -n $k)" -lt 4194304 ] && sysctl -w $k=4194304 >/dev/null 2>&1; done
common="--spead2-bin $X/spead2/bin --frameloop $X/frameloop --trial-s 1.5 --frameloop-slack-s 2.5 --start-gbps 12 --bisect-steps 3 --sizes 1472"
for round in 1 2 3; do
  timeout 90 python3 ingest_compare.py $common --tools spead2,frameloop-cuda --frameloop-slots 16 --out $R/r$round-slots16.txt > /dev/null 2>&1
  timeout 60 python3 ingest_compare.py $common --tools frameloop-cuda --frameloop-slots 256 --out $R/r$round-slots256.txt > /dev/null 2>&1
  grep -hE "^(spead2|frameloop)" $R/r$round-slots16.txt $R/r$round-slots256.txt | sed "s/^/round $round /"
done
tar -czf $OUT/slots2.tar.gz -C $R .
