"""Which CPU each thread of the sender and the receiver ran on, per trial.

Reads the sampler's log of r2-run.sh (`ps -eLo pid,tid,psr,pcpu,comm,args`
every 100 ms, each round after a `T <time>` line; unpack r2-placement.txt.xz
first) and prints, for each trial (one receiving process), how many samples
it has, how often a receiver thread sat on a CPU the sender last ran on
(`S+<thread>`), the receiving thread on the result thread's or the main
thread's CPU, and the three most common (sender CPUs, receiving thread's
CPU, result thread's CPU).

The sampler cut command lines at 120 characters, so a frameloop trial's
datagram size shows as "?" (r2-run.sh runs 8,972 B first, then 1,472 B).

Usage: python3 placement_summary.py r2-placement.txt
"""
import collections
import re
import sys


def read_samples(path):
    samples, current = [], None
    for line in open(path):
        if line.startswith("T "):
            current = []
            samples.append(current)
            continue
        fields = line.split(None, 5)
        if current is None or len(fields) < 6:
            continue
        pid, tid, cpu, pcpu, comm, args = fields
        current.append((int(pid), int(tid), int(cpu), float(pcpu), comm, args))
    return samples


def main(path):
    trials, last_pid = [], None
    for threads in read_samples(path):
        send = [t for t in threads if " send " in t[5] or t[4] == "spead2_send"]
        recv = [t for t in threads if " run " in t[5] or t[4] == "spead2_recv"]
        if not send or not recv:
            continue
        if recv[0][0] != last_pid:
            size = re.search(r"--packet(?:-bytes)? (\d+)", send[0][5])
            tool = "spead2" if recv[0][4] == "spead2_recv" else recv[0][5].split()[0].split("/")[-1]
            trials.append({"tool": tool, "size": size.group(1) if size else "?", "n": 0,
                           "together": collections.Counter(), "placements": collections.Counter()})
            last_pid = recv[0][0]
        trial = trials[-1]
        trial["n"] += 1
        sender_cpus = {t[2] for t in send}
        for t in recv:
            if t[2] in sender_cpus:
                trial["together"]["S+" + (t[4] if t[0] != t[1] else "main")] += 1
        cpu_of = {(t[4] if t[0] != t[1] else "main"): t[2] for t in recv}
        rx = cpu_of.get("frameloop-rx")
        if rx is not None and cpu_of.get("frameloop-resul") == rx:
            trial["together"]["rx+result"] += 1
        if rx is not None and cpu_of.get("main") == rx:
            trial["together"]["rx+main"] += 1
        trial["placements"][(tuple(sorted(sender_cpus)), rx, cpu_of.get("frameloop-resul"))] += 1
    for t in trials:
        print(t["tool"], t["size"], t["n"], dict(t["together"]),
              "most common (sender CPUs, rx, result):", t["placements"].most_common(3))


if __name__ == "__main__":
    main(sys.argv[1])
