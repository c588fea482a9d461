#!/usr/bin/env bash
# Host-backend latency over loopback: the appliance and its loopback sender in
# one process, 64 KiB frames at 1,000 frames/s (the issue's reference load),
# then 8 KiB frames. Writes the report and the exact command lines to
# bench/results/host-latency-<date>.txt.
#
# Usage: bench/host_latency.sh [path/to/frameloop]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN="${1:-target/release/frameloop}"
if [ ! -x "$BIN" ]; then cargo build --release; BIN=target/release/frameloop; fi
mkdir -p bench/results
OUT="bench/results/host-latency-$(date -u +%Y%m%d-%H%M).txt"
{
  echo "# host backend latency over loopback"
  echo "# machine: $(nproc) cores, $(uname -r), load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  for args in "--frame-bytes 65536 --rate 1000 --duration 10" "--frame-bytes 8192 --rate 1000 --duration 10"; do
    echo
    echo "\$ $BIN bench --backend host $args"
    "$BIN" bench --backend host $args 2>&1
  done
} | tee "$OUT"
echo "written to $OUT" >&2
