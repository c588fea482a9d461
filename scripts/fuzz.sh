#!/usr/bin/env bash
# Builds every fuzz target in fuzz/ with libFuzzer on the stable toolchain
# (sancov instrumentation through -Cpasses/-Cllvm-args, no nightly, no
# cargo-fuzz needed) and runs each one for a bounded time or number of runs,
# starting from fuzz/seeds/<target> and fuzz/regressions/<target>. Fails if any target crashes; a crashing
# input is left in fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh [--seconds S] [--runs N] [--jobs J] [--out FILE] [TARGET...]
#
#   --seconds S  wall-clock limit per target (default 30; 0 = none)
#   --runs N     stop a target after N executions (default: no limit)
#   --jobs J     parallel libFuzzer processes per target (default 1)
#   --out FILE   append one summary line per target to FILE
#   --bin-dir D  run the targets already built in D (no build: for a
#                machine without a Rust toolchain)
#
# Summary line: target=<t> executions=<n> seconds=<s> crashes=<c> jobs=<j>
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds=30
runs=0
jobs=1
out=""
bin_dir=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --bin-dir) bin_dir="$2"; shift 2 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed -n 's/\.rs$//p' | sort)
fi

[ -n "$out" ] && mkdir -p "$(dirname "$out")"

if [ -z "$bin_dir" ]; then
  triple=$(rustc -vV | sed -n 's/^host: //p')
  export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
  -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
  -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
  # An explicit --target keeps these flags off build scripts and proc macros.
  (cd fuzz && cargo build --release --target "$triple" --bins)
  bin_dir="$root/fuzz/target/$triple/release"
fi

failed=0
for t in "${targets[@]}"; do
  bin="$bin_dir/$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no target $t (fuzz/fuzz_targets/$t.rs)" >&2; exit 2; }
  corpus="fuzz/corpus/$t"
  artifacts="fuzz/artifacts/$t"
  logs=$(mktemp -d)
  mkdir -p "$corpus" "$artifacts" "fuzz/seeds/$t"
  args=(-artifact_prefix="$artifacts/" -print_final_stats=1 -rss_limit_mb=2048 -timeout=10)
  [ "$seconds" -gt 0 ] && args+=(-max_total_time="$seconds")
  # libFuzzer's -runs counts per process: split the total between the jobs.
  [ "$runs" -gt 0 ] && args+=(-runs=$(((runs + jobs - 1) / jobs)))
  # Inputs that once crashed (tests/fuzz_regressions.rs) start every run too.
  regressions=()
  [ -d "fuzz/regressions/$t" ] && regressions=("fuzz/regressions/$t")
  start=$(date +%s%N)
  pids=()
  for j in $(seq 1 "$jobs"); do
    "$bin" "${args[@]}" "$corpus" "fuzz/seeds/$t" "${regressions[@]}" >"$logs/$j.log" 2>&1 &
    pids+=($!)
  done
  crashes=0
  for p in "${pids[@]}"; do
    wait "$p" || crashes=$((crashes + 1))
  done
  elapsed_ms=$((($(date +%s%N) - start) / 1000000))
  execs=0
  for j in $(seq 1 "$jobs"); do
    n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$logs/$j.log" | tail -1)
    execs=$((execs + ${n:-0}))
  done
  line=$(printf 'target=%s executions=%s seconds=%d.%03d crashes=%s jobs=%s' "$t" "$execs" $((elapsed_ms / 1000)) $((elapsed_ms % 1000)) "$crashes" "$jobs")
  echo "$line"
  [ -n "$out" ] && echo "$line" >>"$out"
  if [ "$crashes" -gt 0 ]; then
    failed=1
    for j in $(seq 1 "$jobs"); do
      grep -q -E "ERROR: libFuzzer|panicked|deadly signal|SUMMARY" "$logs/$j.log" && tail -40 "$logs/$j.log" >&2
    done
    echo "fuzz.sh: $t crashed; the input is in $artifacts/ (add it as a regression test)" >&2
  fi
  rm -rf "$logs"
done
exit "$failed"
