#!/usr/bin/env python3
"""Rounds of the wire script with loopback's delivery on the sender's core
(A, the kernel's default) and steered to a core of its own (C, RPS_CPUS):
per variant and case, last_rx_to_seen p50 and p99.9 (medians over the
rounds), each streamed case's difference to the same round's 8 KiB figure
against the wire target's allowance (1.5x the chain's device-memory floor
at the rate in 8k.txt), the frame logs of all rounds together (where the
slow frames' time went), and what the cores did while each case ran
(/proc/stat, /proc/softirqs and /proc/interrupts before and after, the
ksoftirqd threads' run time) and the appliance's threads (threads.txt).

    python3 analyze.py 8k.txt ROOT > analysis.txt    (ROOT/rN-V/CASE/...)
"""
import csv, glob, os, re, statistics, sys
from collections import defaultdict

rate = float(re.search(r"device memory (\d+) GB/s", open(sys.argv[1]).read()).group(1)) * 1e9
root = sys.argv[2]
device_bytes = {"image-768k-on": 8 << 20, "default-2m-on": 16 << 20}
allow = {k: 1.5 * b / rate * 1e6 for k, b in device_bytes.items()}
cases = ["small-8k"] + list(device_bytes)
med = statistics.median
CORES = ["cpu1", "cpu2", "cpu3", "cpu4", "cpu5"]


def table(path):
    """The run's latency table: segment -> (p50, p99.9)."""
    out = {}
    for line in open(path, errors="replace"):
        m = re.match(r"^(last_rx_to_seen|publish_to_detect|compute|done_to_seen)\s+([\d.]+)\s+[\d.]+\s+[\d.]+\s+([\d.]+)", line)
        if m and m.group(1) not in out:
            out[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    return out


def cpu_snapshot(path):
    """Per core: /proc/stat times (ticks), softirq counts by kind, interrupt counts by kind."""
    text = open(path).read().split("\n\n")
    stat, soft, irq = {}, defaultdict(dict), defaultdict(dict)
    for line in text[0].splitlines():
        f = line.split()
        if f and re.match(r"cpu\d+$", f[0]):
            stat[f[0]] = dict(zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), map(int, f[1:9])))
    for block, into in ((text[1] if len(text) > 1 else "", soft), (text[2] if len(text) > 2 else "", irq)):
        lines = block.strip().splitlines()
        if not lines:
            continue
        cols = [c.lower() for c in lines[0].split()]
        for line in lines[1:]:
            f = line.split()
            if not f:
                continue
            name = f[0].rstrip(":")
            for c, v in zip(cols, f[1:1 + len(cols)]):
                if v.isdigit():
                    into[c][name] = int(v)
    ksoft = {}
    for line in (text[3] if len(text) > 3 else "").splitlines():
        f = line.split()
        if len(f) >= 2 and f[0].startswith("ksoftirqd/"):
            ksoft["cpu" + f[0].split("/")[1]] = int(f[1])
    return stat, soft, irq, ksoft


def cpu_delta(d):
    try:
        b, a = cpu_snapshot(f"{d}/cpu-before.txt"), cpu_snapshot(f"{d}/cpu-after.txt")
    except (OSError, IndexError):
        return None
    hz = os.sysconf("SC_CLK_TCK")
    out = {}
    for c in CORES:
        s = {k: (a[0][c][k] - b[0][c][k]) * 1000 / hz for k in ("steal", "irq", "softirq", "system", "user", "idle")} if c in a[0] else {}
        for k in ("NET_RX", "TIMER", "SCHED", "RCU", "HRTIMER"):
            s[k] = a[1][c].get(k, 0) - b[1][c].get(k, 0)
        for k in ("LOC", "RES", "CAL", "TLB", "IWI"):
            s[k] = a[2][c].get(k, 0) - b[2][c].get(k, 0)
        s["ksoftirqd_ms"] = (a[3].get(c, 0) - b[3].get(c, 0)) / 1e6
        out[c] = s
    return out


def frames(path):
    with open(path) as fh:
        for r in csv.DictReader(fh):
            t = {k: int(r[k]) for k in ("last_rx_ns", "published_ns", "detect_ns", "done_ns", "seen_ns")}
            if not t["last_rx_ns"] or not t["seen_ns"]:
                continue
            yield ((t["published_ns"] - t["last_rx_ns"]) / 1e3, (t["detect_ns"] - t["published_ns"]) / 1e3,
                   (t["done_ns"] - t["detect_ns"]) / 1e3, (t["seen_ns"] - t["done_ns"]) / 1e3,
                   (t["seen_ns"] - t["last_rx_ns"]) / 1e3)


rounds = defaultdict(dict)  # (round, variant) -> case -> table
for d in sorted(glob.glob(f"{root}/r*-*/")):
    m = re.search(r"/r(\d+)-(\w+)/$", d)
    for c in cases:
        p = f"{d}{c}/run.txt"
        if os.path.exists(p):
            t = table(p)
            if "last_rx_to_seen" in t:
                rounds[(int(m.group(1)), m.group(2))][c] = t
variants = sorted({v for _, v in rounds})
print(f"device memory {rate / 1e9:.0f} GB/s; allowances over the 8 KiB figure: "
      + ", ".join(f"{k} +{v:.2f} µs" for k, v in allow.items()))
print("\nmedians over the rounds, µs (p50 / p99.9):")
for v in variants:
    for c in cases:
        ts = [r[c] for (n, vv), r in rounds.items() if vv == v and c in r]
        if not ts:
            continue
        segs = " ".join(f"{k} {med(t[k][0] for t in ts):.1f}/{med(t[k][1] for t in ts):.1f}"
                        for k in ("last_rx_to_seen", "publish_to_detect", "compute", "done_to_seen") if all(k in t for t in ts))
        p999 = sorted(t["last_rx_to_seen"][1] for t in ts)
        print(f"  {v} {c:14s} rounds {len(ts):2d}  {segs}  last_rx_to_seen p99.9 range {p999[0]:.0f}-{p999[-1]:.0f}")
print("\nstreamed minus the same round's 8 KiB last_rx_to_seen (p50; p99.9), against the allowance:")
for v in variants:
    for c, a in allow.items():
        pairs = [(r[c]["last_rx_to_seen"], r["small-8k"]["last_rx_to_seen"]) for (n, vv), r in rounds.items()
                 if vv == v and c in r and "small-8k" in r]
        if not pairs:
            continue
        d50 = [x[0] - y[0] for x, y in pairs]
        d999 = [x[1] - y[1] for x, y in pairs]
        print(f"  {v} {c:14s} p50 median {med(d50):+.2f} (range {min(d50):+.1f} to {max(d50):+.1f}), within +{a:.2f} in "
              f"{sum(x <= a for x in d50)} of {len(d50)}; p99.9 median {med(d999):+.1f}, within in {sum(x <= a for x in d999)} of {len(d999)}")

names = ("rx_to_publish", "publish_to_detect", "compute", "done_to_seen")
print("\nframe logs, all rounds together (µs); frames above 100 µs from the last datagram's kernel timestamp")
print("to the result seen, by the segment that took most of it (rx_to_publish: the kernel timestamp to")
print("publication: delivery into the socket, the wait for the receive call, the call, the reassembly):")
for v in variants:
    for c in cases:
        fs = [f for p in sorted(glob.glob(f"{root}/r*-{v}/{c}/frames.csv")) for f in frames(p)]
        if not fs:
            continue
        tot = sorted(f[4] for f in fs)
        rx = sorted(f[0] for f in fs)
        q = lambda xs, p: xs[min(len(xs) - 1, int(p * len(xs)))]
        slow = [f for f in fs if f[4] > 100]
        most = defaultdict(int)
        for f in slow:
            most[names[max(range(4), key=lambda i: f[i])]] += 1
        print(f"  {v} {c:14s} frames {len(fs)} p50 {q(tot, .5):.1f} p99 {q(tot, .99):.1f} p99.9 {q(tot, .999):.1f}  "
              f"rx_to_publish p50 {q(rx, .5):.1f} p99 {q(rx, .99):.1f} p99.9 {q(rx, .999):.1f}  above 100: {len(slow)} {dict(most)}")

print("\nwhat the cores did while each case ran, medians over the rounds (ms of steal, softirq time, ksoftirqd's run time;")
print("counts of NET_RX softirqs, local timer (LOC), rescheduling (RES) and function-call (CAL) interrupts):")
for v in variants:
    for c in cases:
        ds = [cpu_delta(d) for d in sorted(glob.glob(f"{root}/r*-{v}/{c}"))]
        ds = [d for d in ds if d]
        if not ds:
            continue
        parts = []
        for core in CORES:
            g = lambda k: med(d[core].get(k, 0) for d in ds)
            parts.append(f"{core} steal {g('steal'):.0f} si {g('softirq'):.0f} ksoftirqd {g('ksoftirqd_ms'):.1f} "
                         f"NET_RX {g('NET_RX'):.0f} LOC {g('LOC'):.0f} RES {g('RES'):.0f} CAL {g('CAL'):.0f}")
        print(f"  {v} {c:14s} rounds {len(ds)}: " + " | ".join(parts))

print("\nthe appliance's threads, medians over the rounds: run-queue wait ms, time slices, voluntary and")
print("involuntary context switches (threads.txt, just before the stop):")
for v in variants:
    for c in cases:
        per = defaultdict(list)
        for p in sorted(glob.glob(f"{root}/r*-{v}/{c}/threads.txt")):
            for line in open(p):
                f = line.split()
                if len(f) >= 6 and f[1].isdigit():
                    per[f[0]].append((int(f[2]) / 1e6, int(f[3]), int(f[4]), int(f[5])))
        if per:
            print(f"  {v} {c:14s} " + " | ".join(
                f"{n} wait {med(x[0] for x in xs):.2f} slices {med(x[1] for x in xs):.0f} vol {med(x[2] for x in xs):.0f} "
                f"invol {med(x[3] for x in xs):.0f}" for n, xs in sorted(per.items()) if n.startswith("frameloop")))

def pearson(a, b):
    ma, mb = statistics.mean(a), statistics.mean(b)
    den = (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / den if den else float("nan")


def ranks(a):
    order = sorted(range(len(a)), key=lambda i: a[i])
    r = [0.0] * len(a)
    for k, i in enumerate(order):
        r[i] = float(k)
    return r


print("\nthe receiver's busy-poll gaps (turns over 50 µs without a wait in epoll, ingest counter busy_poll_gaps)")
print("beside the frames whose last datagram took over 50 µs from its kernel timestamp to publication:")
for v in variants:
    for c in cases:
        gaps, slow, n = [], [], 0
        for d in sorted(glob.glob(f"{root}/r*-{v}/{c}")):
            try:
                m = re.search(r"^\s+busy_poll_gaps\s+(\d+)", open(f"{d}/run.txt").read(), re.M)
            except OSError:
                continue
            if not m or not os.path.exists(f"{d}/frames.csv"):
                continue
            fs = list(frames(f"{d}/frames.csv"))
            gaps.append(int(m.group(1)))
            slow.append(sum(f[0] > 50 for f in fs))
            n += len(fs)
        if gaps:
            print(f"  {v} {c:14s} rounds {len(gaps)} frames {n}: busy_poll_gaps total {sum(gaps)} (per round {gaps}); "
                  f"frames with rx_to_publish over 50 µs total {sum(slow)} (per round {slow}); per-round correlation "
                  f"Pearson {pearson(gaps, slow):.2f}, of ranks (ties in order) {pearson(ranks(gaps), ranks(slow)):.2f}")

print("\nframes with rx_to_publish over 50 µs that had another such frame within 20 ms (the tail in stretches):")
for v in variants:
    for c in cases:
        total = near = 0
        for p in sorted(glob.glob(f"{root}/r*-{v}/{c}/frames.csv")):
            with open(p) as fh:
                at = [int(r["last_rx_ns"]) for r in csv.DictReader(fh)
                      if int(r["last_rx_ns"]) and int(r["published_ns"]) - int(r["last_rx_ns"]) > 50_000]
            total += len(at)
            near += sum(any(j != i and abs(t - u) < 20_000_000 for j, u in enumerate(at)) for i, t in enumerate(at))
        if total:
            print(f"  {v} {c:14s} {near} of {total}")
