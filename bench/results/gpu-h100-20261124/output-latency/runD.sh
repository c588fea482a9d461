#!/bin/bash
# 10,000 frames through a CUDA appliance with [output]: a Rust consumer
# (frameloop consume) and a Python/PyTorch consumer attached; publish->seen
# percentiles of each against the appliance's own result-seen time.
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
tar -C .carry -xJf .carry/bin.tar.xz
B=.carry/bin
python3 -m pip install -q --no-deps --no-index .carry/frameloop-*.whl >/dev/null 2>&1
mkdir -p /tmp/fl-out
$B/frameloop run --config .carry/dlpack.toml --duration 60 > $OUT/run.txt 2>&1 &
RUN=$!
for i in $(seq 1 60); do [ -S /tmp/fl-out/output.sock ] && break; sleep 0.5; done
$B/frameloop consume --socket /tmp/fl-out/output.sock --count 10000 > $OUT/consume.txt 2>&1 &
CON=$!
timeout 35 python3 .carry/dlpack_check.py /tmp/fl-out/output.sock 10000 > $OUT/python.txt 2>&1 &
PYC=$!
sleep 1
$B/frameloop send --to 127.0.0.1:5600 --rate 500 --count 10000 --frame-bytes 8192 > $OUT/send.txt 2>&1
sleep 2
wait $CON; echo "consume rc=$?"
wait $PYC; echo "python rc=$?"
kill -INT $RUN; wait $RUN; echo "run rc=$?"
python3 - $OUT/consume.txt <<'PY'
import sys,re
v=sorted(float(m.group(1)) for l in open(sys.argv[1]) for m in [re.search(r"publish_to_seen_us ([0-9.]+)",l)] if m)
q=lambda p: v[min(len(v)-1,int(p*len(v)))]
print(f"consume publish->seen us: p50 {q(.5):.1f} p90 {q(.9):.1f} p99 {q(.99):.1f} p99.9 {q(.999):.1f} over {len(v)}")
PY
tail -2 $OUT/consume.txt; tail -3 $OUT/python.txt
grep -iE "publish.*seen|frames|lost" $OUT/run.txt | head -12
