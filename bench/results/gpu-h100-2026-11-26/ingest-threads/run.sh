#!/bin/bash
# Who keeps the receiving thread off the CPU at 8,972 B and ~34 Gb/s (CUDA backend, the comparison's config)?
# Per-thread context switches, migrations and run delay from /proc while the sender runs.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin
R=$OUT/r19; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
cat > /tmp/rx.toml <<'TOML'
backend = "cuda"
[ingest]
bind = "127.0.0.1:8888"
recv_buffer_bytes = 4194304
gro = true
[ring]
slots = 32
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
snap() { # $1 pid, $2 label
  for t in /proc/$1/task/*; do
    printf "%s %s %s | %s | %s\n" "$2" "$(basename $t)" "$(cat $t/comm)" \
      "$(grep -E 'voluntary_ctxt' $t/status | tr -s ' \t' ' ' | tr '\n' ' ')" \
      "$(grep -E 'nr_migrations|nr_involuntary_switches|nr_wakeups |wait_sum|sum_exec_runtime' $t/sched 2>/dev/null | tr -s ' \t' ' ' | tr '\n' ' ')"
  done
}
for rate in 30 34 38; do
  fps=$(python3 -c "print(round($rate*1e9/8/65536/1.0055,1))")
  $B/frameloop run --config /tmp/rx.toml --duration 7 --json > $R/run-$rate.json 2> $R/run-$rate.err &
  rp=$!; sleep 2.5
  $B/frameloop send --to 127.0.0.1:8888 --rate $fps --frame-bytes 65536 --packet-bytes 8972 --duration 3 --pacing sleep --pattern static > $R/send-$rate.json 2>&1 &
  sp=$!; sleep 0.5
  snap $rp rx-before > $R/threads-$rate.txt; snap $sp send-before >> $R/threads-$rate.txt
  sleep 2.4
  snap $rp rx-after >> $R/threads-$rate.txt; snap $sp send-after >> $R/threads-$rate.txt
  wait $sp; wait $rp
  echo "== $rate Gb/s: $(python3 -c "
import json,sys
d=json.load(open('$R/run-$rate.json'))
def find(o):
    if isinstance(o,dict):
        if 'kernel_drops' in o or 'datagrams' in o: return o
        for v in o.values():
            r=find(v)
            if r: return r
print({k:v for k,v in (find(d) or {}).items() if k in ('datagrams','frames_complete','frames_incomplete','ring_full','kernel_drops','socket_drops')})
" 2>&1)"
  grep -E "after" $R/threads-$rate.txt | cut -c1-400
done
cd $OUT && tar -czf r19.tgz r19 && rm -rf r19
