#!/usr/bin/env python3
"""The wire target over all frames of several rounds of bench/streaming/run.sh.

A round's p99.9 at 2 MiB is taken over some 900 frames, about its worst
frame; pooling the frame logs (FRAME_LOG=1) of every round gives each case
a p99.9 over thousands of frames. For each streamed case this prints the
pooled last-datagram-to-result-seen p50 and p99.9 against the target (the
pooled 8 KiB figure plus 1.5x the chain's device-memory floor, at the
device memory rate `bench --compare` measured in the same call), and the
same for the odd and the even rounds on their own, so that a verdict that
rests on a few frames shows as a split.

    python3 bench/streaming/pooled.py 8k.txt ROOT        (ROOT/rN[-V]/CASE/frames.csv)
"""
import csv
import glob
import re
import sys

# Bytes the chain reads and writes in device memory per frame (its floor's
# bytes): the image chain at 768 KiB and the default chain at 2 and 8 MiB.
DEVICE_BYTES = {"image-768k-on": 8 << 20, "default-2m-on": 16 << 20, "default-8m-on": 64 << 20}
SMALL = "small-8k"


def latencies(path):
    """Last datagram's kernel timestamp to the result seen, µs, per frame of one log."""
    out = []
    with open(path) as fh:
        for row in csv.DictReader(fh):
            last_rx, seen = int(row["last_rx_ns"]), int(row["seen_ns"])
            if last_rx and seen:
                out.append((seen - last_rx) / 1e3)
    return out


def quantile(sorted_xs, p):
    return sorted_xs[min(len(sorted_xs) - 1, int(p * len(sorted_xs)))]


def load(root):
    """Every frame log under ROOT, read once: {(round, case): latencies}."""
    logs = {}
    for path in glob.glob(f"{root}/r*/*/frames.csv"):
        m = re.search(r"/r(\d+)[^/]*/([^/]+)/frames.csv$", path)
        logs[(int(m.group(1)), m.group(2))] = latencies(path)
    return logs


def pooled(logs, case, keep=lambda n: True):
    """(frames, p50, p99.9) of `case` over the rounds `keep` accepts."""
    xs = sorted(x for (n, c), ls in logs.items() if c == case and keep(n) for x in ls)
    return (len(xs), quantile(xs, 0.5), quantile(xs, 0.999)) if xs else None


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    m = re.search(r"device memory (\d+) GB/s", open(sys.argv[1]).read())
    if not m:
        sys.exit(f"{sys.argv[1]}: no 'device memory N GB/s' line; give the output of "
                 "`frameloop bench --backend cuda --compare` from the same call")
    rate = float(m.group(1)) * 1e9
    root = sys.argv[2]
    allow = {c: 1.5 * b / rate * 1e6 for c, b in DEVICE_BYTES.items()}
    logs = load(root)
    rounds = sorted({n for n, _ in logs})
    if not any(case == SMALL for _, case in logs):
        sys.exit(f"{root}: no r*/{SMALL}/frames.csv; run the rounds with FRAME_LOG=1, each into ROOT/rN")
    print(f"device memory {rate / 1e9:.0f} GB/s; {len(rounds)} rounds; allowance over the 8 KiB figure: "
          + ", ".join(f"{c} +{a:.2f} µs" for c, a in allow.items()))
    for label, keep in (("all rounds", lambda n: True), ("odd rounds", lambda n: n % 2 == 1),
                        ("even rounds", lambda n: n % 2 == 0)):
        small = pooled(logs, SMALL, keep)
        if not small:
            continue
        print(f"{label}: {SMALL} frames {small[0]} p50 {small[1]:.1f} p99.9 {small[2]:.1f}")
        for case, a in allow.items():
            got = pooled(logs, case, keep)
            if not got:
                continue
            t50, t999 = small[1] + a, small[2] + a
            print(f"  {case:14s} frames {got[0]:6d} p50 {got[1]:6.1f} (target {t50:.1f}: "
                  f"{'within' if got[1] <= t50 else 'over'}) p99.9 {got[2]:6.1f} (target {t999:.1f}: "
                  f"{'within' if got[2] <= t999 else 'over'})")


if __name__ == "__main__":
    main()
