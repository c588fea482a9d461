#!/usr/bin/env python3
"""Per variant and streamed case of run-pace.sh: how fast each frame's datagrams came (the mean
interval between its first and last datagram's kernel timestamps), for all frames and for the
frames whose last datagram waited over 50 µs before publication, and the share of such frames
by interval band.

    python3 intervals.py frames-spans.csv.xz > intervals.txt
"""
import csv, lzma, sys
from collections import defaultdict

DATAGRAMS = {"image-768k-on": 89, "default-2m-on": 236}  # datagrams a frame (ingest counters: datagrams / frames)
BANDS = [(0, 3.5), (3.5, 4.0), (4.0, 4.5), (4.5, 5.0), (5.0, 99)]
frames = defaultdict(list)
for r in csv.DictReader(lzma.open(sys.argv[1], "rt")):
    if r["case"] in DATAGRAMS:
        interval = int(r["first_to_last_rx_ns"]) / 1e3 / (DATAGRAMS[r["case"]] - 1)
        frames[(r["variant"], r["case"])].append((interval, int(r["last_rx_to_published_ns"]) / 1e3))


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * p))]


print("mean datagram interval of each frame, µs (p1/p10/p50/p90), and frames whose last datagram waited over 50 µs")
for (v, case), fs in sorted(frames.items()):
    iv = [i for i, _ in fs]
    slow = [i for i, p in fs if p > 50]
    print(f"  {v} {case:14s} frames {len(fs):6d}  interval {q(iv, .01):.2f}/{q(iv, .1):.2f}/{q(iv, .5):.2f}/{q(iv, .9):.2f}"
          f"  waited >50 µs: {len(slow)} ({100 * len(slow) / len(fs):.2f} %), their interval p50 {q(slow, .5) if slow else 0:.2f}")
print("\nshare of frames whose last datagram waited over 50 µs, by the frame's mean datagram interval (µs)")
for (v, case), fs in sorted(frames.items()):
    cells = []
    for lo, hi in BANDS:
        band = [p for i, p in fs if lo <= i < hi]
        if band:
            cells.append(f"{lo:.1f}-{hi if hi < 99 else '':<3}: {100 * sum(p > 50 for p in band) / len(band):5.2f} % of {len(band)}")
    print(f"  {v} {case:14s} " + " | ".join(cells))
