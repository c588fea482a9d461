#!/bin/bash
# `frameloop bench` at 8 KiB (CUDA backend, threads pinned as in run-readers.sh) with two reading
# threads, the receivers polling for 2 ms and then for 8 ms after their last datagram: with N readers
# each sees about 1/N of the datagrams, so a reader polling for 2 ms at 2,000 frames/s parks in epoll
# now and then, and a frame reaching a parked reader waits for its wake-up.
set -u
mkdir -p /tmp/fl && tar -xJf $BUNDLE/bin.tar.xz -C /tmp/fl
B=/tmp/fl/bin; R=/tmp/budget; rm -rf $R; mkdir -p $R
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
PIN="[service]\nreceiver_cpu = 1\nresult_cpu = 2\nloop_cpu = 3\nassembly_cpu = 6\nreader_cpus = [7, 8]"
for run in split-2000 split2-2000 split2-8000 split2-2000b split2-8000b; do
  budget=${run#*-}; budget=${budget%b}; readers=1; [ "${run%%-*}" = split2 ] && readers=2
  printf "[ingest]\npoll_budget_us = $budget\nassembly_thread = true\nreading_threads = $readers\n$PIN\n" > $R/$run.toml
  timeout 40 $B/frameloop bench --backend cuda --frame-bytes 8192 --packet-bytes 8972 --rate 2000 --duration 5 --config $R/$run.toml > $R/bench-8k-$run.txt 2>&1
  echo "bench 8k $run rc=$?" >> $R/summary.txt
  grep -E "^(latency|assembly|end_to_end) " $R/bench-8k-$run.txt >> $R/summary.txt
done
cat $R/summary.txt
cp $R/summary.txt $R/bench-8k-*.txt $OUT/
