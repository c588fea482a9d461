#!/usr/bin/env bash
# The NATS sink at a given result rate, end to end on one box: a JetStream
# nats-server, `frameloop run` (host backend, [sink.nats]) fed by
# `frameloop send` over loopback, then the stop report's sink counters
# against the results the loop produced, and the JetStream stream's own
# message count.
#
# Usage: bench/nats/sink_rate.sh OUTDIR [RATE] [SECONDS] [FRAME_BYTES]
# Env: FRAMELOOP (default target/release/frameloop), NATS_SERVER (nats-server).
set -uo pipefail
out="${1:?usage: sink_rate.sh OUTDIR [RATE] [SECONDS] [FRAME_BYTES]}"
rate="${2:-10000}"
secs="${3:-10}"
bytes="${4:-1024}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
fl="${FRAMELOOP:-$repo/target/release/frameloop}"
nats="${NATS_SERVER:-$(command -v nats-server || echo /usr/sbin/nats-server)}"
mkdir -p "$out"
work="$(mktemp -d)"
trap 'kill $natspid 2>/dev/null; rm -rf "$work"' EXIT
port=$((20000 + RANDOM % 20000))
"$nats" -js -p "$port" -sd "$work/js" > "$out/nats-server.txt" 2>&1 &
natspid=$!
sleep 1
cat > "$work/frameloop.toml" <<TOML
backend = "host"
[ingest]
bind = "127.0.0.1:5700"
[ring]
slot_bytes = $bytes
slots = 256
results = 65536
[sink.nats]
url = "nats://127.0.0.1:$port"
box_id = "bench"
buffer = 100000
TOML
cp "$work/frameloop.toml" "$out/frameloop.toml"
"$fl" run --config "$work/frameloop.toml" --duration $((secs + 20)) --json > "$out/run.json" 2> "$out/run.log" &
run=$!
sleep 2
"$fl" send --to 127.0.0.1:5700 --rate "$rate" --duration "$secs" --frame-bytes "$bytes" > "$out/send.txt" 2>&1
sleep 3
kill -INT "$run"; wait "$run"; rc=$?
python3 - "$out/run.json" "$out/send.txt" "$rate" "$secs" <<'PY' | tee "$out/summary.txt"
import json, sys
report = json.load(open(sys.argv[1]))
def find(d, key):
    if isinstance(d, dict):
        if key in d: return d[key]
        for v in d.values():
            r = find(v, key)
            if r is not None: return r
    elif isinstance(d, list):
        for v in d:
            r = find(v, key)
            if r is not None: return r
sink = find(report, "nats_sink")
frames = find(report, "frames")
text = open(sys.argv[2]).read()
sent = json.loads(text[text.index("{"):])
print(f"offered {sys.argv[3]} frames/s for {sys.argv[4]} s; sent {sent['frames']} frames at {sent['frames_per_s']:.0f}/s")
print(f"appliance frames: {json.dumps(frames)}")
print(f"nats sink: {json.dumps(sink)}")
lost = frames["processed"] - sink["acked"]
print(f"results acknowledged by JetStream: {sink['acked']} of {frames['processed']} ({lost} missing, {sink['dropped']} dropped)")
PY
echo "run rc=$rc"
