#!/bin/bash
# How long a datagram waits between its kernel receive timestamp and the
# receiver's look at it, for one-datagram (8 KiB) frames at 1,000/s over
# loopback with a busy-polling receiver (ingest.poll_budget_us = 2000):
# the bare floor (bench/streaming/rx_floor.c, receiving on core 1) against
# frameloop's `assembly` segment (host backend) with its threads left to
# the scheduler, with the receiver pinned to core 1, and with the receiver
# on core 1 and the loop and result threads on core 0. The sender sleeps
# between frames (--pacing sleep) and runs on core 0. Three runs each;
# writes summary.txt to $OUT.
#
#   OUT=/tmp/rxlat FRAMELOOP=target/release/frameloop bench/streaming/receive_latency.sh
set -u
B=${FRAMELOOP:-target/release/frameloop}
OUT=${OUT:-/tmp/rxlat}
PORT=5712
mkdir -p "$OUT"
gcc -O2 -o "$OUT/rx_floor" "$(dirname "$0")/rx_floor.c" -lpthread
send() { taskset -c 0 "$B" send --to 127.0.0.1:$PORT --rate 1000 --count 3000 --frame-bytes 8192 --packet-bytes 8972 --pacing sleep > "$OUT/send.txt" 2>&1; }

# The floor, receiving from frameloop's sender.
for i in 1 2 3; do
  RX_FLOOR_EXTERNAL=1 RX_FLOOR_PORT=$PORT taskset -c 1 "$OUT/rx_floor" gro > "$OUT/floor-$i.txt" 2>&1 &
  sleep 0.3; send; wait
  echo "floor (receiver on core 1)     $(cat "$OUT/floor-$i.txt")" >> "$OUT/summary.txt"
done

variant() {
  local name=$1 service=$2
  {
    echo 'backend = "host"'
    echo '[ingest]'
    echo "bind = \"127.0.0.1:$PORT\""
    echo 'poll_budget_us = 2000'
    echo '[ring]'
    echo 'slots = 16'
    echo 'slot_bytes = 8192'
    echo '[loop]'
    echo 'poll_budget_us = 0'
    printf '%b\n' "$service"
  } > "$OUT/$name.toml"
  for i in 1 2 3; do
    "$B" run --config "$OUT/$name.toml" > "$OUT/$name-$i.txt" 2>&1 &
    local pid=$!
    for _ in $(seq 1 100); do grep -q "listening on" "$OUT/$name-$i.txt" 2>/dev/null && break; sleep 0.05; done
    send; sleep 0.5
    kill -INT $pid; wait $pid
    printf "%-30s %s\n" "$name" "$(grep -m1 '^assembly' "$OUT/$name-$i.txt")" >> "$OUT/summary.txt"
  done
}
variant unpinned ''
variant receiver-pinned '[service]\nreceiver_cpu = 1'
variant all-pinned '[service]\nreceiver_cpu = 1\nloop_cpu = 0\nresult_cpu = 0'
cat "$OUT/summary.txt"
