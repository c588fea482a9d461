#!/usr/bin/env bash
# frameloop's GPU checks and benchmarks, in one pass, on a GPU box:
#   1. the GPU tests (ignored elsewhere) of the given test binaries,
#   2. `frameloop bench --backend cuda --compare` (orchestration modes), as is
#      and with the measuring thread placed (bench/configs/placed-measurement.toml)
#      for 8, 32 and 64 KiB frames,
#   3. wire-to-result: `frameloop bench` over loopback UDP into the mapped
#      ring, cuda and host backends side by side, 8 KiB and 64 KiB frames at
#      1,000 and 10,000 frames/s.
# Usage: bench/gpu/run_checks.sh BIN_DIR OUT_DIR [full|quick|wire]
#   quick: tests and the comparison only; wire: the wire runs only
# BIN_DIR holds `frameloop` and test binaries named gpu_*; each step's output
# is appended, under its command line, to OUT_DIR/<group>.txt (tests,
# compare, wire), so a handful of files hold everything.
set -uo pipefail
BIN="$1"
OUT="$2"
MODE="${3:-full}"
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export RUST_BACKTRACE=1

step() {
  local group="$1"
  shift
  local log
  log="$(mktemp)"
  {
    echo
    echo "\$ $*"
    timeout -k 10 180 "$@" 2>&1
    echo "exit status: $?"
  } >"$log"
  cat "$log" >>"$OUT/$group.txt"
  tail -n 25 "$log"
  rm -f "$log"
}

{
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv
  nproc
  uname -r
} >"$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"

[ "$MODE" = wire ] || for t in "$BIN"/gpu_* "$BIN"/rdma_gpu; do
  [ -x "$t" ] || continue
  step tests "$t" --include-ignored --test-threads=1 --nocapture
done

if [ "$MODE" != wire ]; then
  step compare "$BIN/frameloop" bench --backend cuda --compare
  step compare "$BIN/frameloop" bench --backend cuda --compare --config bench/configs/placed-measurement.toml
  for fb in 32768 65536; do
    step compare "$BIN/frameloop" bench --backend cuda --compare --frame-bytes "$fb" \
      --config bench/configs/placed-measurement.toml
  done
fi
[ "$MODE" = quick ] && exit 0

for fb in 8192 65536; do
  for rate in 1000 10000; do
    for be in cuda host; do
      step wire "$BIN/frameloop" bench --backend "$be" --frame-bytes "$fb" \
        --rate "$rate" --duration 4 --packet-bytes 8972
    done
  done
done
