#!/bin/bash
# The receiving thread's CPU per gigabit by recvmmsg + epoll against io_uring
# multishot recvmsg with provided buffers (bench/ingest_rx_cost.c), on the same
# loopback traffic from `frameloop send` (64 KiB frames, GSO, sleep pacing),
# alternating, at several rates and both datagram sizes. Writes one line per
# trial to $OUT/trials.txt. CASES (say "8972 16 1472 8": size and Gb/s
# pairs) replaces the default rates; RX_COST (a built rx_cost) skips the build.
#
#   apt-get install liburing-dev
#   OUT=/tmp/rx-cost FRAMELOOP=target/release/frameloop bench/ingest_rx_cost.sh
set -u
B=${FRAMELOOP:-target/release/frameloop}
OUT=${OUT:-/tmp/rx-cost}
ROUNDS=${ROUNDS:-2}
mkdir -p "$OUT"
RX=${RX_COST:-$OUT/rx_cost}
[ -n "${RX_COST:-}" ] || gcc -O2 -Wall -o "$RX" "$(dirname "$0")/ingest_rx_cost.c" -luring || exit 1
read -r -a PAIRS <<< "${CASES:-8972 2 8972 4 8972 6 1472 2 1472 4}"
: > "$OUT/trials.txt"
for round in $(seq 1 "$ROUNDS"); do
  for ((k = 0; k < ${#PAIRS[@]}; k += 2)); do
    size=${PAIRS[k]} gbps=${PAIRS[k + 1]}
    rate=$(python3 -c "print(round($gbps * 1e9 / 8 / 65536, 3))")
    for mode in recvmmsg uring; do
      "$RX" $mode 5811 3 > "$OUT/rx.txt" 2>&1 &
      pid=$!
      sleep 0.3
      "$B" send --to 127.0.0.1:5811 --rate "$rate" --frame-bytes 65536 --packet-bytes "$size" \
        --duration 4 --pacing sleep > "$OUT/send.txt" 2>&1
      wait $pid
      echo "round=$round size=$size offered_gbps=$gbps $(cat "$OUT/rx.txt")" | tee -a "$OUT/trials.txt"
    done
  done
done
