#!/bin/bash
# Turns of an idle busy-polling receiver: recvmmsg calls per second and CPU per call, with one
# single-datagram frame every 50 ms keeping it polling.
BIN=$1; cd "$(dirname "$0")"
$BIN run --config config.toml --duration 7 > run.txt 2>&1 &
sleep 1.0; $BIN send --to 127.0.0.1:47555 --rate 20 --duration 5 --frame-bytes 8000 --packet-bytes 8972 > send.txt 2>&1 &
sleep 1.5; pid=$(pgrep -f " run --config config.toml"); tid=$(for t in /proc/$pid/task/*; do [ "$(cat $t/comm)" = frameloop-rx ] && basename $t; done)
perf stat -x, -e syscalls:sys_enter_recvmmsg,task-clock -t $tid -- sleep 2 2>&1 | awk -F, '/recvmmsg/{n=$1} /task-clock/{t=$1} END{printf "%d turns/s, %.0f ns a turn\n", n/2, t*1e6/n}'
wait
