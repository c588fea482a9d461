#!/bin/bash
# Wire to result over loopback, 8 KiB and streamed 768 KiB frames: the build before (A: summaries
# computed by the asking thread under the result sink's lock) against the build after (B: the
# result thread computes them between results, and a summary no longer walks every bucket for the
# mean), each with the appliance's threads left to the scheduler and pinned apart (sender pinned
# too), rounds alternating the builds' order. Then the 8 KiB bench of each build.
set -u
export LD_LIBRARY_PATH=/usr/local/cuda/lib64
T0=$(date +%s)
mkdir -p /tmp/fa /tmp/fb && tar -xJf $BUNDLE/bin-a.tar.xz -C /tmp/fa && tar -xJf $BUNDLE/bin-b.tar.xz -C /tmp/fb
R=/tmp/wiretail; rm -rf $R; mkdir -p $R
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv; nproc; uname -r; lscpu | grep -i -E 'model name|L2|L3|Thread|Core|Socket|NUMA'; } > $R/machine.txt 2>&1
CORES=()
declare -A SEEN
for c in $(seq 0 $(($(nproc) - 1))); do
  sib=$(cat /sys/devices/system/cpu/cpu$c/topology/thread_siblings_list)
  [ -n "${SEEN[$sib]:-}" ] && continue
  SEEN[$sib]=1
  case ",$sib," in *,0,*|,0-*) continue;; esac
  CORES+=($c)
done
PIN="receiver_cpu = ${CORES[0]}\nresult_cpu = ${CORES[1]}\nloop_cpu = ${CORES[2]}"
SENDCPU=${CORES[3]}
echo "pinned: receiver ${CORES[0]}, result ${CORES[1]}, loop ${CORES[2]}, sender $SENDCPU" | tee -a $R/summary.txt
line() { # DIR CASE
  local f=$1/$2/run.txt
  echo "$(grep -E "^(last_rx_to_seen|done_to_seen|publish_to_detect|compute) " $f | sort -u | awk '{printf "%s %s p99.9 %s  ", $1, $2, $5}')"
}
for round in $(seq 1 30); do
  left=$((500 - ($(date +%s) - T0)))
  [ $left -lt 40 ] && break
  if [ $((round % 2)) = 1 ]; then order="A B"; else order="B A"; fi
  for build in $order; do
    if [ $build = A ]; then B=/tmp/fa/bin/frameloop; else B=/tmp/fb/bin/frameloop; fi
    for pin in free pinned; do
      d=$R/r$round-$build-$pin
      if [ $pin = pinned ]; then
        OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" SERVICE_EXTRA="$PIN" SEND_CPUS=$SENDCPU FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
      else
        OUT=$d CASES="small-8k image-768k-on" LINK_GBPS=25 SEND_EXTRA="--gso off" INGEST_EXTRA="poll_budget_us = 2000" FRAMELOOP=$B timeout 60 bash bench/streaming/run.sh > /dev/null 2>&1
      fi
      for c in small-8k image-768k-on; do
        echo "wire $round $build $pin $c $(line $d $c)" | tee -a $R/summary.txt
      done
    done
  done
done
for build in A B; do
  if [ $build = A ]; then B=/tmp/fa/bin/frameloop; else B=/tmp/fb/bin/frameloop; fi
  timeout 40 $B bench --backend cuda --compare --paths-only --frames 4000 --frame-bytes 8192 > $R/8k-$build.txt 2>&1
  echo "8k-$build rc=$? $(grep -E '^resident poll(,| budget,) (fused chain|tiled fused kernel)' $R/8k-$build.txt | awk '{print $(NF-8), "gpu", $(NF-1)}' | tr '\n' ' ')" | tee -a $R/summary.txt
done
echo "elapsed $(( $(date +%s) - T0 ))" | tee -a $R/summary.txt
cp $R/summary.txt $OUT/
cd /tmp && tar -cJf $OUT/wiretail.tar.xz wiretail
