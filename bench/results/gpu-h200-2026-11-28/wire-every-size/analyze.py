#!/usr/bin/env python3
"""Per size, over the rounds of summary.txt: last_rx_to_seen p50 and p99.9
(median and range), and each streamed case's difference to the same
round's 8 KiB figure against the wire target's allowance: 1.5x the chain's
device-memory floor, from the device memory rate in 8k.txt (the bytes are
src/gpu/floors.rs's chain_bytes: 768 KiB image chain 8 MiB, default chain
8x its frame). With the round directories (sizes/rN/CASE/run.txt), also
the medians of the segments.

    python3 analyze.py summary.txt 8k.txt [sizes] > analysis.txt
"""
import re, statistics, sys, os, glob
from collections import defaultdict

rate = float(re.search(r"device memory (\d+) GB/s", open(sys.argv[2]).read()).group(1)) * 1e9
device_bytes = {"image-768k": 8 << 20, "default-2m": 16 << 20, "default-8m": 64 << 20}
allow = {k: 1.5 * b / rate * 1e6 for k, b in device_bytes.items()}
fig = defaultdict(dict)
for line in open(sys.argv[1]):
    m = re.match(r"round (\d+) (\S+)\s+\S+\s+last_rx_to_seen\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
    if m:
        fig[int(m.group(1))][m.group(2)] = (float(m.group(3)), float(m.group(4)))
med = statistics.median
print(f"device memory {rate / 1e9:.0f} GB/s; allowances over the 8 KiB figure: " +
      ", ".join(f"{k} +{v:.2f} µs" for k, v in allow.items()))
cases = ["small-8k"] + [f"{s}-{m}" for s in device_bytes for m in ("off", "on")]
print(f"{'case':16s} rounds  p50 median (range)      p99.9 median (range)")
for c in cases:
    v = [r[c] for r in fig.values() if c in r]
    if v:
        p50, p999 = [x[0] for x in v], [x[1] for x in v]
        print(f"{c:16s} {len(v):6d}  {med(p50):6.1f} ({min(p50):.1f}-{max(p50):.1f})   "
              f"{med(p999):7.1f} ({min(p999):.1f}-{max(p999):.1f})")
print("\nstreamed minus 8 KiB, per round (p50; p99.9):")
for s, a in allow.items():
    c = f"{s}-on"
    d50 = [r[c][0] - r["small-8k"][0] for r in fig.values() if c in r and "small-8k" in r]
    d999 = [r[c][1] - r["small-8k"][1] for r in fig.values() if c in r and "small-8k" in r]
    print(f"  {s}: p50 median {med(d50):+.1f} (range {min(d50):+.1f} to {max(d50):+.1f}), within +{a:.2f} in "
          f"{sum(x <= a for x in d50)} of {len(d50)}; p99.9 median {med(d999):+.1f}, within in {sum(x <= a for x in d999)}")
if len(sys.argv) > 3:
    print("\nsegment p50 medians over the rounds (µs):")
    for c in cases:
        seg = defaultdict(list)
        for p in glob.glob(os.path.join(sys.argv[3], "r*", c, "run.txt")):
            for line in open(p):
                m = re.match(r"(publish_to_detect|compute|done_to_seen|assembly)\s+([\d.]+)", line)
                if m:
                    seg[m.group(1)].append(float(m.group(2)))
        if seg:
            print(f"  {c:16s} " + "  ".join(f"{k} {med(v):.1f}" for k, v in sorted(seg.items())))
