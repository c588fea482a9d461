#!/usr/bin/env bash
# Where a PyTorch consumer's time goes between an output's publish and the
# tensor in its hands: one CUDA appliance with [output]
# (bench/configs/output-latency.toml), then, one after another, latency-only
# consumers (bench/output/check_consumer.py --latency-only) in several
# variants, each fed FRAMES frames of 8 KiB at RATE frames/s. Each variant's
# publish->frame (next() returned) and publish->tensor percentiles are
# printed with the appliance's own publish->seen over the whole run.
#
# Usage: bench/output/hold_variants.sh OUTDIR [FRAMES] [RATE]
# Env: VARIANTS="spin spin-capsule ..." runs only those (default: all).
set -uo pipefail
out="${1:?usage: hold_variants.sh OUTDIR [FRAMES] [RATE]}"
frames="${2:-5000}"
rate="${3:-1000}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
fl="${FRAMELOOP:-$repo/target/release/frameloop}"
py="${PYTHON:-python3}"
config="$repo/bench/configs/output-latency.toml"
mkdir -p "$out" /tmp/fl-out
rm -f /tmp/fl-out/output.sock
"$fl" run --config "$config" --duration 600 > "$out/run.txt" 2>&1 &
run=$!
for _ in $(seq 1 120); do [ -S /tmp/fl-out/output.sock ] && break; sleep 0.5; done
variants=(
  "spin:"
  "spin-release-early:--release-early"
  "spin-capsule:--capsule"
  "spin-slot-views:--slot-views"
  "sleep-20us:--spin-us 20"
)
for v in "${variants[@]}"; do
  name="${v%%:*}"; flags="${v#*:}"
  if [ -n "${VARIANTS:-}" ] && [[ " $VARIANTS " != *" $name "* ]]; then continue; fi
  # shellcheck disable=SC2086
  "$py" "$here/check_consumer.py" --socket /tmp/fl-out/output.sock --config "$config" --frame-bytes 8192 \
    --pattern random --count "$frames" --latency-only $flags > "$out/$name.txt" 2>&1 &
  c=$!
  sleep 6
  "$fl" send --to 127.0.0.1:5600 --rate "$rate" --count "$frames" --frame-bytes 8192 --pattern random > "$out/send-$name.txt" 2>&1
  wait "$c"
  echo "== $name ($flags)"; grep -E "publish->|from_dlpack|checked" "$out/$name.txt"
done | tee "$out/summary.txt"
kill -INT "$run"; wait "$run"
{ echo "== appliance, whole run"; grep -E "publish_to_seen" "$out/run.txt" | tail -1; } | tee -a "$out/summary.txt"
