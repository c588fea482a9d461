#!/usr/bin/env python3
"""Medians over the rounds of run.sh's summary.txt, and the frame logs of
every round (wire15/rN-V/CASE/frames.csv): where the slowest frames'
time went, from the last datagram's kernel timestamp to the result seen.

    python3 analyze.py summary.txt wire15 > analysis.txt
"""
import csv, glob, os, re, statistics, sys
from collections import defaultdict

summary, root = sys.argv[1], sys.argv[2]
rows = defaultdict(list)
p50 = defaultdict(dict)
for line in open(summary):
    m = re.match(r"wire (\d+) (\S+) (\S+) (.*)", line)
    if not m:
        continue
    rnd, v, case, rest = m.groups()
    f = dict((k, (float(a), float(b))) for k, a, b in re.findall(r"(\w+) ([\d.]+) p99.9 ([\d.]+)", rest))
    rows[(v, case)].append(f)
    p50[(rnd, v)][case] = f["last_rx_to_seen"][0]
med = statistics.median
print("medians over the rounds, µs (p50 / p99.9):")
for (v, case), fs in sorted(rows.items()):
    segs = " ".join(f"{k} {med(x[k][0] for x in fs):.1f}/{med(x[k][1] for x in fs):.1f}"
                    for k in ("last_rx_to_seen", "publish_to_detect", "compute", "done_to_seen"))
    p999 = sorted(x["last_rx_to_seen"][1] for x in fs)
    print(f"  {v} {case:14s} rounds {len(fs)}  {segs}  last_rx_to_seen p99.9 range {p999[0]:.0f}-{p999[-1]:.0f}")
for v in sorted({v for _, v in p50}):
    d = [c["image-768k-on"] - c["small-8k"] for (r, vv), c in p50.items() if vv == v and len(c) == 2]
    print(f"  {v}: 768 KiB minus 8 KiB last_rx_to_seen p50, per round: median {med(d):+.2f}, "
          f"range {min(d):+.2f} to {max(d):+.2f}, within +3.03 in {sum(x <= 3.03 for x in d)} of {len(d)}")

def frames(path):
    with open(path) as fh:
        for r in csv.DictReader(fh):
            t = {k: int(r[k]) for k in ("last_rx_ns", "published_ns", "detect_ns", "done_ns", "seen_ns")}
            yield ((t["published_ns"] - t["last_rx_ns"]) / 1e3, (t["detect_ns"] - t["published_ns"]) / 1e3,
                   (t["done_ns"] - t["detect_ns"]) / 1e3, (t["seen_ns"] - t["done_ns"]) / 1e3,
                   (t["seen_ns"] - t["last_rx_ns"]) / 1e3)

names = ("rx_to_publish", "publish_to_detect", "compute", "done_to_seen")
print("\nframe logs, all rounds together; frames whose last_rx_to_seen is above 100 µs, and the segment that")
print("took most of it (rx_to_publish: last datagram's kernel timestamp to publication, which includes the")
print("datagram's wait in the socket for its receive call):")
for v in ("A", "B"):
    for case in ("small-8k", "image-768k-on"):
        all_f = [f for p in sorted(glob.glob(f"{root}/r*-{v}/{case}/frames.csv")) for f in frames(p)]
        if not all_f:
            continue
        tot = sorted(f[4] for f in all_f)
        q = lambda p: tot[min(len(tot) - 1, int(p * len(tot)))]
        slow = [f for f in all_f if f[4] > 100]
        most = defaultdict(int)
        for f in slow:
            most[names[max(range(4), key=lambda i: f[i])]] += 1
        rx = sorted(f[0] for f in all_f)
        print(f"  {v} {case:14s} frames {len(all_f)} p50 {q(0.5):.1f} p99 {q(0.99):.1f} p99.9 {q(0.999):.1f}  "
              f"rx_to_publish p50 {rx[len(rx)//2]:.1f} p99 {rx[int(0.99*len(rx))]:.1f} p99.9 {rx[int(0.999*len(rx))]:.1f}  "
              f"above 100 µs: {len(slow)} ({dict(most)})")
