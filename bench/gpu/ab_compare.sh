#!/usr/bin/env bash
# Two frameloop builds side by side on one GPU: `bench --backend cuda
# --compare` of build A, then B, alternating for ROUNDS rounds, so that
# a change is judged against the spread of the same machine in the same
# run. Prints the resident and graph-launch rows of every run last.
# Usage: bench/gpu/ab_compare.sh FRAMELOOP_A FRAMELOOP_B OUT_DIR [ROUNDS] [bench args...]
set -uo pipefail
A="$1"; B="$2"; OUT="$3"; ROUNDS="${4:-2}"
shift 4 2>/dev/null || shift $#
mkdir -p "$OUT"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin="$A"; [ "$side" = B ] && bin="$B"
    f="$OUT/compare-$side-$r.txt"
    echo "\$ $bin bench --backend cuda --compare $*" >"$f"
    timeout -k 10 240 "$bin" bench --backend cuda --compare "$@" >>"$f" 2>&1
    echo "exit status: $?" >>"$f"
  done
done
for f in "$OUT"/compare-*.txt; do
  echo "== $(basename "$f")"
  grep -E "^resident poll budget, fused|^resident poll, graph IF body|^graph-launch-per-frame|^mode" "$f"
done
