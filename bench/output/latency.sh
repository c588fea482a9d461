#!/usr/bin/env bash
# Output-ring consumers against the appliance, on a GPU machine: a CUDA
# appliance with [output] (bench/configs/output-latency.toml) is fed N frames
# of 8 KiB by `frameloop send`; attached meanwhile are `frameloop consume`
# (Rust, spinning) and bench/output/check_consumer.py twice (PyTorch,
# spinning: one holds each output as a tensor without a copy and checks it
# against the CPU chain; one only holds each tensor, for its latency). Prints each consumer's publish-to-seen percentiles next to the
# appliance's own publish-to-seen from the same run.
#
# Usage: bench/output/latency.sh OUTDIR [FRAMES] [RATE]
# Env: FRAMELOOP (default target/release/frameloop), PYTHON (python3),
#      MPS=1 to run everything under the CUDA MPS control daemon,
#      SLOT_VIEWS=0 to have the PyTorch consumers export each output's
#      capsule instead of taking their tensors from slot views (the default),
#      MODEL=1 to attach examples/python/torch_consumer.py (a small model on
#      each output) as a third consumer.
set -uo pipefail
out="${1:?usage: latency.sh OUTDIR [FRAMES] [RATE]}"
frames="${2:-10000}"
rate="${3:-1000}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fl="${FRAMELOOP:-$repo/target/release/frameloop}"
py="${PYTHON:-python3}"
config="$repo/bench/configs/output-latency.toml"
slot_views="--slot-views"
[ "${SLOT_VIEWS:-1}" = 0 ] && slot_views=""
mkdir -p "$out" /tmp/fl-out
rm -f /tmp/fl-out/output.sock

if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/fl-mps CUDA_MPS_LOG_DIRECTORY=/tmp/fl-mps-log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  nvidia-cuda-mps-control -d || { echo "latency.sh: cannot start the MPS control daemon" >&2; exit 2; }
  trap 'echo quit | nvidia-cuda-mps-control' EXIT
fi

"$fl" run --config "$config" --duration $((frames / rate + 60)) > "$out/run.txt" 2>&1 &
run=$!
for _ in $(seq 1 120); do [ -S /tmp/fl-out/output.sock ] && break; sleep 0.5; done
[ -S /tmp/fl-out/output.sock ] || { echo "latency.sh: the appliance did not serve its output socket" >&2; cat "$out/run.txt" >&2; exit 1; }
"$fl" consume --socket /tmp/fl-out/output.sock --count "$frames" --spin-us 100000000 > "$out/consume.txt" 2>&1 &
rust=$!
"$py" "$here/check_consumer.py" --socket /tmp/fl-out/output.sock --config "$config" \
  --frame-bytes 8192 --pattern random --count "$frames" $slot_views > "$out/python.txt" 2>&1 &
pyc=$!
"$py" "$here/check_consumer.py" --socket /tmp/fl-out/output.sock --config "$config" \
  --frame-bytes 8192 --pattern random --count "$frames" --latency-only $slot_views > "$out/python-latency.txt" 2>&1 &
pyl=$!
model=""
if [ "${MODEL:-0}" = 1 ]; then
  "$py" "$repo/examples/python/torch_consumer.py" --socket /tmp/fl-out/output.sock --count "$frames" > "$out/model.txt" 2>&1 &
  model=$!
fi
sleep 8   # both attached (torch's start-up)
"$fl" send --to 127.0.0.1:5600 --rate "$rate" --count "$frames" --frame-bytes 8192 --pattern random > "$out/send.txt" 2>&1
wait "$rust"; rust_rc=$?
wait "$pyc"; py_rc=$?
wait "$pyl"; pyl_rc=$?
model_rc=-
if [ -n "$model" ]; then
  # The model consumer may fall behind and never reach its count: give it
  # a little longer than the run, then stop it.
  for _ in $(seq 1 20); do kill -0 "$model" 2>/dev/null || break; sleep 1; done
  kill -INT "$model" 2>/dev/null; wait "$model"; model_rc=$?
fi
kill -INT "$run"; wait "$run"; run_rc=$?
{
  echo "frames $frames rate $rate mps ${MPS:-0}"
  echo "rust consumer rc=$rust_rc: $(tail -1 "$out/consume.txt")"
  "$py" - "$out/consume.txt" <<'PY'
import re, sys
v = sorted(float(m.group(1)) for l in open(sys.argv[1]) for m in [re.search(r"publish_to_seen_us ([0-9.]+)", l)] if m)
q = lambda p: v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
print(f"rust consumer publish->seen us: p50 {q(.5):.1f} p90 {q(.9):.1f} p99 {q(.99):.1f} p99.9 {q(.999):.1f} over {len(v)}")
PY
  echo "python consumer (checks every output) rc=$py_rc:"; tail -2 "$out/python.txt"
  echo "python consumer (latency only) rc=$pyl_rc:"; tail -3 "$out/python-latency.txt"
  if [ -n "$model" ]; then
    echo "model consumer rc=$model_rc: $(tail -1 "$out/model.txt")"
    "$py" - "$out/model.txt" <<'PY'
import re, sys
v = sorted(float(m.group(1)) for l in open(sys.argv[1]) for m in [re.search(r"publish_to_result_us ([0-9.]+)", l)] if m)
q = lambda p: v[min(len(v) - 1, int(p * len(v)))] if v else float("nan")
print(f"model consumer publish->result us: p50 {q(.5):.1f} p99 {q(.99):.1f} p99.9 {q(.999):.1f} over {len(v)}")
PY
  fi
  echo "appliance rc=$run_rc, its own latency:"; grep -E "publish_to_seen|done_to_seen|publish_to_done" "$out/run.txt" | tail -3
} | tee "$out/summary.txt"
