#!/bin/bash
# 10,000 frames through a CUDA appliance with [output] and one Rust consumer
# (frameloop consume): its publish->seen against the appliance's own.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin
mkdir -p /tmp/fl-out
$B/frameloop run --config .carry/dlpack.toml --duration 60 > $OUT/run.txt 2>&1 &
RUN=$!
for i in $(seq 1 60); do [ -S /tmp/fl-out/output.sock ] && break; sleep 0.5; done
$B/frameloop consume --socket /tmp/fl-out/output.sock --count 10000 > $OUT/consume.txt 2>&1 &
CON=$!
sleep 1
$B/frameloop send --to 127.0.0.1:5600 --rate 500 --count 10000 --frame-bytes 8192 > $OUT/send.txt 2>&1
sleep 2
wait $CON; echo "consume rc=$?"
kill -INT $RUN; wait $RUN; echo "run rc=$?"
python3 - $OUT/consume.txt <<'PY'
import sys,re
v=sorted(float(m.group(1)) for l in open(sys.argv[1]) for m in [re.search(r"publish_to_seen_us ([0-9.]+)",l)] if m)
q=lambda p: v[min(len(v)-1,int(p*len(v)))]
print(f"consume publish->seen us: p50 {q(.5):.1f} p90 {q(.9):.1f} p99 {q(.99):.1f} p99.9 {q(.999):.1f} over {len(v)}")
PY
tail -1 $OUT/consume.txt
grep -A8 "latency (us)" $OUT/run.txt | grep -E "publish_to_seen|publish_to_detect|done_to_seen" | head -3
