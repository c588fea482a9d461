#!/usr/bin/env bash
# Where frameloop's UDP receiving thread spends its time, per datagram:
# `frameloop send` -> `frameloop run` over loopback (host backend, the
# comparison's config: ring.policy "latest", unpack u8 -> stats), `perf record`
# of the receiver process while the sender runs, then the samples of the
# receiving thread (frameloop-rx) sorted into system call, copies,
# reassembly bookkeeping, publication, page faults and waiting by
# bench/ingest_profile.py.
#
# Usage: bench/ingest_profile.sh [FRAMELOOP] [DATAGRAM_BYTES] [GBPS] [SECONDS]
#   (defaults: target/release/frameloop 8972 4 5). Needs perf (Debian: linux-perf).
# Env: OUT  directory for perf.data, the sample dump and the breakdown (default: a temp dir).
#      INGEST_EXTRA  lines added to the [ingest] table (e.g. "batch = 8").
#      CONFIG_EXTRA  TOML appended to the config, \n for a new line (e.g.
#        "[service]\nreceiver_cpu = 3\nresult_cpu = 7\nloop_cpu = 11").
#      BACKEND  the backend (default host; cuda on a GPU host, where the chain runs on the GPU).
#      SLOTS  ring.slots (default 256; the comparison gives the CUDA backend 32).
#      PERF  the perf binary (default: perf on the PATH).
#      PERF_EVENT  the sampling event (default: perf's own; cpu-clock in a virtual
#        machine without hardware counters).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin="${1:-$here/../target/release/frameloop}"
size="${2:-8972}"
gbps="${3:-4}"
secs="${4:-5}"
out="${OUT:-$(mktemp -d)}"
port=8899
hz=2999
mkdir -p "$out"
fps=$(python3 -c "print(round($gbps * 1e9 / 8 / 65536, 1))")
perf="${PERF:-perf}"
cat > "$out/config.toml" <<TOML
backend = "${BACKEND:-host}"
[ingest]
bind = "127.0.0.1:$port"
recv_buffer_bytes = 4194304
gro = true
${INGEST_EXTRA:-}
[ring]
slots = ${SLOTS:-256}
slot_bytes = 65536
policy = "latest"
[loop]
poll_budget_us = 0
data_not_ready_sleep_interval_us = 100
[[chain]]
op = "unpack"
format = "u8"
[[chain]]
op = "stats"
TOML
printf '%b\n' "${CONFIG_EXTRA:-}" >> "$out/config.toml"
"$bin" run --config "$out/config.toml" --duration $((secs + 4)) --json > "$out/run.json" 2> "$out/run.err" &
rp=$!
hexport=$(printf '%04X' $port)
for _ in $(seq 200); do grep -q ":$hexport " /proc/net/udp && break; sleep 0.05; done
"$perf" record ${PERF_EVENT:+-e "$PERF_EVENT"} -F $hz -g -p $rp -o "$out/perf.data" -- sleep $((secs + 1)) > "$out/perf.log" 2>&1 &
pp=$!
sleep 0.3
"$bin" send --to 127.0.0.1:$port --rate "$fps" --frame-bytes 65536 --packet-bytes "$size" --duration "$secs" > "$out/send.json" 2>&1
wait $pp
wait $rp
"$perf" script -i "$out/perf.data" --comm frameloop-rx -F tid,ip,sym > "$out/rx-samples.txt" 2>/dev/null
python3 "$here/ingest_profile.py" "$out/rx-samples.txt" $hz "$out/run.json" | tee "$out/breakdown.txt"
echo "perf data and breakdown: $out"
