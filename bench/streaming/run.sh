#!/bin/bash
# Wire to result over loopback UDP, with sub-frame streaming into GPU memory
# (loop.stream_to_gpu = "on") and without ("off": the chain reads the mapped
# slot in place), in one run on one GPU: 768 KiB image frames at 1,000
# frames/s (the image-u12 chain), 2 MiB at 300 and 8 MiB at 100 (the default
# chain), plus 8 KiB frames at 1,000 (default chain, default settings) as the
# small-frame figure. The measure is the appliance's last_rx_to_seen
# segment: last packet received (kernel timestamp) to the result seen by the
# host result thread. Writes one directory per case and summary.txt to $OUT.
#
#   OUT=/tmp/streaming FRAMELOOP=target/release/frameloop bench/streaming/run.sh
#
# LOOP_EXTRA (say 'poll_budget_us = 5') is appended to every case's [loop],
# INGEST_EXTRA (say 'poll_budget_us = 2000') to its [ingest], RING_EXTRA
# (say 'huge_pages = false') to its [ring]. LINK_GBPS
# (say 25) has the sender put each frame on the wire at that link's pace
# (`frameloop send --link-gbps`) instead of in one burst. SEND_EXTRA (say
# '--gso off': every datagram paced on its own, as a sensor sends them,
# rather than 64 KiB messages back to back) is added to the sender's
# arguments. SERVICE_EXTRA (say 'receiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3':
# the appliance's threads on cores of their own, as docs/operations.md
# deploys them on a GPU host) goes into a [service] section, and SEND_CPUS
# (say 4) runs the sender under `taskset -c` (on loopback the sender's CPU
# also delivers the datagrams into the receiver's socket).
#
# FRAME_LOG=1 has every case write its frame log (`run --frame-log`, one
# CSV line per frame with its times) to frames.csv in its directory.
#
# RPS_CPUS (say 5; root only) steers loopback's receive processing, the
# kernel's delivery of each datagram into the receiver's socket, to those
# cores (receive packet steering on lo) instead of the sender's core, as a
# NIC's interrupts on a core of their own would; the previous setting is
# restored at exit. The kernel timestamp is taken before the steering, so
# last_rx_to_seen includes it. CPU_STATS=1 saves /proc/stat, /proc/softirqs
# and /proc/interrupts before and after each case (cpu-before.txt,
# cpu-after.txt in its directory: steal time, interrupts and softirqs per
# core while it ran, and each ksoftirqd thread's run time), and each of
# the appliance's threads' run time, run-queue wait and context switches
# just before it stops (threads.txt).
#
# SOFTIRQ_FIFO (say 50; root only, with SEND_CPUS) runs the ksoftirqd
# threads of the sender's cores at that SCHED_FIFO priority while the
# cases run: on loopback, delivery the kernel defers from the sending call
# to ksoftirqd otherwise waits until the spinning sender leaves the core.
#
# FRAMES_SCALE (say 10) sends that many times each case's frames (3,000
# at 8 KiB and 768 KiB, 900 at 2 MiB, 400 at 8 MiB): a p99.9 over 900
# frames is the run's worst frame or so, over 9,000 its ninth worst.
#
# CASES (say 'image-768k-on default-2m-on') runs only the cases named, by
# their directory names (small-8k, image-768k-off, ..., default-8m-on).
#
# With the argument `crossover` it runs the default chain at 64, 256, 512
# and 768 KiB instead (1,000 frames/s), to find where streaming starts to pay.
set -u
B=${FRAMELOOP:-target/release/frameloop}
OUT=${OUT:-/tmp/streaming}
PORT=5710
mkdir -p "$OUT"

# What the settings below changed on the host, undone at exit (one command each).
RESTORE=()
trap 'for c in "${RESTORE[@]}"; do eval "$c"; done' EXIT
trap 'exit 143' INT TERM

if [ -n "${RPS_CPUS:-}" ]; then
  RPS_FILE=/sys/class/net/lo/queues/rx-0/rps_cpus
  mask=0
  for c in ${RPS_CPUS//,/ }; do mask=$((mask | (1 << c))); done
  RPS_BEFORE=$(cat "$RPS_FILE") || exit 1
  if ! printf '%x' "$mask" > "$RPS_FILE"; then
    echo "RPS_CPUS=$RPS_CPUS: cannot write $RPS_FILE (receive packet steering needs root and a kernel with RPS)" >&2
    exit 1
  fi
  RESTORE+=("echo $RPS_BEFORE > $RPS_FILE")
fi

if [ -n "${SOFTIRQ_FIFO:-}" ]; then
  [ -n "${SEND_CPUS:-}" ] || { echo "SOFTIRQ_FIFO needs SEND_CPUS" >&2; exit 1; }
  for c in ${SEND_CPUS//,/ }; do
    for p in $(pgrep -x "ksoftirqd/$c"); do
      chrt -f -p "$SOFTIRQ_FIFO" "$p" || exit 1
      RESTORE+=("chrt -o -p 0 $p")
    done
  done
fi

cpu_stats() {
  [ -n "${CPU_STATS:-}" ] || return 0
  {
    cat /proc/stat; echo; cat /proc/softirqs; echo; cat /proc/interrupts; echo
    for p in $(pgrep -x 'ksoftirqd/[0-9]+'); do echo "$(cat /proc/$p/comm) $(cat /proc/$p/schedstat)"; done
  } > "$1" 2>&1
}

# Each thread of process $1: name, then run ns, run-queue wait ns and time
# slices (schedstat), then its voluntary and involuntary context switches.
thread_stats() {
  [ -n "${CPU_STATS:-}" ] || return 0
  for t in /proc/$1/task/*; do
    echo "$(cat $t/comm) $(cat $t/schedstat) $(grep -E '^(non)?voluntary_ctxt_switches' $t/status | awk '{printf "%s ", $2}')"
  done > "$2" 2>&1
}

IMAGE_CHAIN='
[[chain]]
op = "unpack"
format = "u12"
scale = 0.000244140625
[[chain]]
op = "filter2d"
width = 1024
kernel = [0.0625, 0.125, 0.0625, 0.125, 0.25, 0.125, 0.0625, 0.125, 0.0625]
[[chain]]
op = "stats"
[[chain]]
op = "threshold"
level = 0.9
'

# case NAME BYTES RATE COUNT STREAM CHAIN
case_run() {
  local name=$1 bytes=$2 rate=$3 count=$(( $4 * ${FRAMES_SCALE:-1} )) stream=$5 chain=$6 dir="$OUT/$1"
  if [ -n "${CASES:-}" ] && [[ " $CASES " != *" $name "* ]]; then return; fi
  mkdir -p "$dir"
  {
    echo 'backend = "cuda"'
    echo "$chain"
    echo '[ingest]'
    echo "bind = \"127.0.0.1:$PORT\""
    echo 'recv_buffer_bytes = 67108864'
    echo "${INGEST_EXTRA:-}"
    echo '[ring]'
    echo 'slots = 16'
    echo "slot_bytes = $bytes"
    echo "${RING_EXTRA:-}"
    echo '[loop]'
    echo "stream_to_gpu = \"$stream\""
    echo "${LOOP_EXTRA:-}"
    if [ -n "${SERVICE_EXTRA:-}" ]; then
      echo '[service]'
      printf '%b\n' "$SERVICE_EXTRA"
    fi
  } > "$dir/config.toml"
  cpu_stats "$dir/cpu-before.txt"
  "$B" run --config "$dir/config.toml" ${FRAME_LOG:+--frame-log "$dir/frames.csv"} > "$dir/run.txt" 2>&1 &
  local pid=$!
  for _ in $(seq 1 200); do grep -q "listening on" "$dir/run.txt" 2>/dev/null && break; sleep 0.05; done
  ${SEND_CPUS:+taskset -c "$SEND_CPUS"} "$B" send --to 127.0.0.1:$PORT --rate "$rate" --count "$count" --frame-bytes "$bytes" \
    --packet-bytes 8972 ${LINK_GBPS:+--link-gbps "$LINK_GBPS"} ${SEND_EXTRA:-} > "$dir/send.txt" 2>&1
  sleep 1
  thread_stats $pid "$dir/threads.txt"
  kill -INT $pid
  wait $pid
  cpu_stats "$dir/cpu-after.txt"
  local line
  line=$(grep -m1 -E "^last_rx_to_seen " "$dir/run.txt")
  # A run that could not start or measured nothing says why in the summary.
  [ -n "$line" ] || line="no figures: $(grep -m1 -E "^frameloop: |ERROR" "$dir/run.txt" | cut -c1-160)"
  local frames behind
  frames=$(grep -m2 -E "^  (complete|incomplete) " "$dir/run.txt" | tr -s ' ' | tr '\n' ' ')
  # A sender that could not keep --link-gbps sent at its own pace: say so beside the figures.
  behind=$(grep -m1 -E '"frames_behind_link"' "$dir/send.txt" | tr -dc '0-9')
  if [ "${behind:-0}" -gt 0 ]; then
    frames="$frames| sender behind the link in $behind frames, up to $(grep -m1 -E '"max_link_lag_ns"' "$dir/send.txt" | tr -dc '0-9') ns"
  fi
  printf "%-22s %-4s %s | %s\n" "$name" "$stream" "$line" "$frames" >> "$OUT/summary.txt"
}

echo "case                   mode last_rx_to_seen (us): p50 p90 p99 p99.9 max count negative | frames" > "$OUT/summary.txt"
case_run small-8k 8192 1000 3000 auto ""
if [ "${1:-}" = crossover ]; then
  # Where streaming starts to pay: the default chain at 1,000 frames/s.
  for bytes in 65536 262144 524288 786432; do
    for stream in off on; do case_run default-$((bytes / 1024))k-$stream $bytes 1000 2000 $stream ""; done
  done
  cat "$OUT/summary.txt"
  exit 0
fi
for stream in off on; do case_run image-768k-$stream 786432 1000 3000 $stream "$IMAGE_CHAIN"; done
for stream in off on; do case_run default-2m-$stream 2097152 300 900 $stream ""; done
for stream in off on; do case_run default-8m-$stream 8388608 100 400 $stream ""; done
cat "$OUT/summary.txt"
