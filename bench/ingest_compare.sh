#!/usr/bin/env bash
# Ingest throughput over loopback, frameloop against spead2's C++ tools:
# the highest rate without loss for 8,972- and 1,472-byte datagrams, with
# both tools sending the same pattern (same datagram size, frame = heap size,
# same frames per second). Prints a table and writes the raw output and every
# command line to bench/results/ingest-compare-<date>.txt.
#
# What is measured is ingest, not processing:
#   - spead2: spead2_send -> spead2_recv (heaps assembled, counted, nothing else).
#   - frameloop: `frameloop send` -> `frameloop run` (host backend) with
#     ring.policy = "latest" (256 slots: the resident loop takes the newest
#     frame, so ingest never waits for it), the lightest chain (unpack u8 ->
#     stats), and a resident loop that sleeps rather than spins when idle
#     ([loop] poll_budget_us = 0). Frames the loop skips are not loss.
#     `frameloop-rt` is the same with ingest.realtime_priority (SCHED_FIFO
#     receiving thread; needs root); `frameloop-copy` with
#     ingest.receive_into_slots = "off"; `-host`/`-cuda` pick the backend.
#     frameloop's sender runs with `--pacing sleep --pattern static` (it
#     neither spins a core between frames nor rewrites the payload, as
#     spead2_send does not).
#   - Loss = datagrams the kernel dropped on the receiving socket
#     (/proc/net/udp `drops`, sampled while the receiver runs) or that the
#     receiver did not count (sent packets vs spead2 `packets` / frameloop
#     `datagrams`, plus any frameloop ingest drop counter), and frames (heaps)
#     incomplete. A trial is clean when there is none.
#   Each trial also logs the receiver's CPU seconds per thread, each receiver
#   thread's run-queue wait and preemptions, and the CPUs the sender ran on
#   (--sender-cpus pins both senders).
#
# Usage: bench/ingest_compare.sh [options of bench/ingest_compare.py]
#   e.g. bench/ingest_compare.sh --tools spead2,spead2-nogso --sizes 8972
# Env:
#   FRAMELOOP     frameloop binary (default: target/release/frameloop, built here)
#   SPEAD2_BUILD_DIR  spead2 tools (default: bench/spead2/build, built by bench/spead2/build.sh)
#   RMEM_MAX, WMEM_MAX  if set (root), net.core.rmem_max / wmem_max are raised
#                 to these for the run and restored afterwards.
#   OUT           results file (default: bench/results/ingest-compare-<date>.txt)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
spead2_dir="${SPEAD2_BUILD_DIR:-$here/spead2/build}"
out="${OUT:-$here/results/ingest-compare-$(date +%Y-%m-%d).txt}"
args=("$@")

wants() { [[ " ${args[*]} " != *" --tools "* ]] || [[ " ${args[*]} " == *"$1"* ]]; }

if wants spead2 && { [[ ! -x "$spead2_dir/bin/spead2_recv" ]] || [[ ! -x "$spead2_dir/bin-nogso/spead2_recv" ]]; }; then
    SPEAD2_BUILD_DIR="$spead2_dir" "$here/spead2/build.sh"
fi
if wants frameloop && [[ -z "${FRAMELOOP:-}" ]]; then
    (cd "$repo" && cargo build --release --bin frameloop)
    FRAMELOOP="${CARGO_TARGET_DIR:-$repo/target}/release/frameloop"
fi

restore=()
export SYSCTL_NOTE=""
raise() {
    local key="$1" want="$2" have
    have=$(sysctl -n "$key")
    if (( want > have )); then
        sysctl -q -w "$key=$want"
        restore+=("$key=$have")
        echo "raised $key from $have to $want for this run"
        SYSCTL_NOTE="${SYSCTL_NOTE:-}raised $key from $have to $want for this run (restored after); "
    fi
}
trap 'for kv in "${restore[@]}"; do sysctl -q -w "$kv"; done' EXIT
[[ -n "${RMEM_MAX:-}" ]] && raise net.core.rmem_max "$RMEM_MAX"
[[ -n "${WMEM_MAX:-}" ]] && raise net.core.wmem_max "$WMEM_MAX"

mkdir -p "$(dirname "$out")"
python3 "$here/ingest_compare.py" \
    --spead2-bin "$spead2_dir/bin" --spead2-nogso-bin "$spead2_dir/bin-nogso" \
    --frameloop "${FRAMELOOP:-$repo/target/release/frameloop}" \
    --out "$out" "$@"
echo "raw output and commands: $out"
