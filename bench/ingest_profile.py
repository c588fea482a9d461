"""Sorts `perf script -F tid,ip,sym` samples of frameloop's receiving thread
into the parts of the receive path and prints each as a share of the
thread's samples and as nanoseconds per datagram.

Usage: ingest_profile.py SAMPLES HZ RUN_JSON
  SAMPLES   `perf script --comm frameloop-rx -F tid,ip,sym` output (call graphs)
  HZ        the sampling frequency of `perf record -F`
  RUN_JSON  `frameloop run --json` output (for the datagram count)

Categories, by the first rule that matches a sample's call chain:
  page faults       any frame is asm_exc_page_fault (first touch of memory)
  waiting           epoll_wait, or the scheduler (preemption, wake-up)
  syscall: copy     inside recvmmsg, leaf _copy_to_iter (kernel -> receive buffer)
  syscall: other    the rest of recvmmsg (socket lock, skb handling, cmsgs, addresses)
  copy into slot    leaf memmove/memcpy (receive buffer -> ring slot), plus the
                    `lock` counter increment that follows it in add_to_frame: the
                    locked instruction waits for the copy's stores to drain, so perf
                    charges most of the copy to it (see docs/ingest.md)
  bookkeeping       other reassembly code (parse, checks, bitmap, counters)
  publication       publish_* and the ring writer
  other             everything else, by leaf
User-space frames have no unwind information in a release build, so the
leaf symbol decides for user code.
"""
import collections
import json
import sys


def stacks(path):
    cur = None
    for line in open(path):
        if not line.strip():
            if cur:
                yield cur
            cur = None
        elif not line.startswith("\t"):  # " TID" header of a sample; its frames follow, tab-indented
            cur = []
        elif cur is not None:
            parts = line.split(None, 1)
            cur.append(parts[1].strip() if len(parts) > 1 else "?")
    if cur:
        yield cur


def category(chain):
    leaf, whole = chain[0], " ".join(chain)
    if "asm_exc_page_fault" in whole:
        return "page faults (first touch of memory)"
    if "recvmmsg" in whole:
        if "copy_to_iter" in leaf or "copy_user" in leaf:
            return "syscall: kernel copy into the receive buffer"
        return "syscall: recvmmsg, the rest (socket, skb, cmsg, address)"
    if "epoll_wait" in whole or "schedule" in whole or "finish_task_switch" in leaf:
        return "waiting: epoll, wake-up, preemption"
    if "memmove" in leaf or "memcpy" in leaf or leaf.endswith("add_to_frame"):
        return "copy into the ring slot (memmove + store drain)"
    if "memset" in leaf:
        return "zeroing missing ranges"
    if "publish" in leaf or "ring::" in leaf:
        return "publication"
    if "reassembly" in leaf or "native::" in leaf or "counters" in leaf or "ingest::" in leaf or "Assembler" in leaf:
        return "reassembly bookkeeping (parse, checks, bitmap, counters)"
    if "clock" in leaf or "read_tsc" in leaf:
        return "clock reads"
    return "other: " + leaf


def datagrams(run_json):
    text = open(run_json).read()
    report = json.loads(text[text.find("{"):])

    def find(o):
        if isinstance(o, dict):
            if "datagrams" in o and "frames_complete" in o:
                return o
            o = list(o.values())
        if isinstance(o, list):
            for v in o:
                r = find(v)
                if r:
                    return r
        return None

    return find(report)


def main():
    samples, hz, run_json = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    ingest = datagrams(run_json)
    n_dg = ingest["datagrams"]
    counts = collections.Counter(category(c) for c in stacks(samples))
    total = sum(counts.values())
    print(f"receiving thread: {total} samples at {hz:g} Hz = {total / hz:.3f} CPU-s for {n_dg} datagrams "
          f"({ingest['bytes'] * 8 / 1e9:.2f} Gbit): {total / hz / n_dg * 1e9:.0f} ns per datagram, "
          f"{total / hz / (ingest['bytes'] * 8 / 1e9):.4f} CPU-s per Gbit")
    print(f"ingest counters (non-zero): {json.dumps({k: v for k, v in ingest.items() if v})}")
    print(f"{'share':>6}  {'samples':>7}  {'ns/datagram':>11}  part")
    for name, v in counts.most_common():
        print(f"{100 * v / total:5.1f}%  {v:7d}  {v / hz / n_dg * 1e9:11.0f}  {name}")


if __name__ == "__main__":
    main()
