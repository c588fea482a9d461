#!/usr/bin/env python3
"""Ingest throughput over loopback: frameloop against spead2's C++ tools.

For each tool and datagram size, finds the highest offered rate at which the
receiver loses nothing: a doubling ladder of offered rates until the first
loss, then bisection between the last clean and the first lossy rate; the
tools' searches take turns, one trial each (--interleave). With
--repeats N each offered rate gets N trials and is clean when most are, so
that one stall of a busy host does not decide it. Both
tools get the same traffic pattern: datagrams of the same size, frames
(spead2: heaps) of the same size, the same frames per second.

Tools:
  spead2        spead2_send -> spead2_recv, built with UDP GSO/GRO
  spead2-nogso  the same tools built without GSO/GRO
  frameloop     `frameloop send` -> `frameloop run` (host backend)
  frameloop-rt  the same with ingest.realtime_priority set: the receiving
                thread runs under SCHED_FIFO, so the resident loop, the
                result thread and the sender cannot delay it (needs root)
  frameloop-split  the same with ingest.assembly_thread = true: one thread
                reads the socket, a second assembles frames (place it with
                `assembly_cpu = N` in --frameloop-config-extra's [service])
  frameloop-splitN  the same with ingest.reading_threads = N: N threads read
                sockets the kernel spreads the port's datagrams over (place
                the further ones with `reader_cpus = [...]` there)
  (the frameloop tools combine: frameloop[-base][-rt][-copy][-split[N]][-host|-cuda])

What is measured is ingest: datagrams off the socket and assembled into
frames, nothing else. spead2_recv assembles heaps and hands them to a
consumer that only counts them; frameloop's receiver assembles frames into
the frame ring and its resident loop runs the lightest chain there is
(unpack u8 -> stats) under `ring.policy = "latest"`, so it takes the newest
frame when it is behind and ingest never waits for processing. Frames the
loop skips are not loss.

A trial is clean when:
  - no datagram was lost: the kernel dropped none on the receiving socket
    (/proc/net/udp `drops`, read while the receiver still runs) and the
    receiver counted every datagram sent (spead2: packets; frameloop:
    `datagrams`), and
  - no frame (heap) was incomplete: spead2 received every heap and evicted or
    flushed none incomplete; frameloop published every frame complete and
    dropped none at ingest (`frames_complete` == frames sent, no ingest drop
    counter raised).

Run it through bench/ingest_compare.sh, which builds what is missing.
"""

import argparse
import datetime
import json
import os
import re
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
FRAMELOOP_HEADER = 48  # native header bytes per datagram (src/wire/native.rs)


class Log:
    """Writes every command line and its raw output to the results file."""

    def __init__(self, path):
        self.path = path
        self.f = open(path, "w") if path else None

    def write(self, text):
        if self.f:
            self.f.write(text + ("" if text.endswith("\n") else "\n"))
            self.f.flush()

    def command(self, argv):
        self.write("$ " + " ".join(shlex.quote(a) for a in argv))

    def raw(self, label, text):
        self.write(f"--- {label} ---\n{text.rstrip()}\n---")


def udp_socket_drops(port):
    """`drops` and `rx_queue` of the UDP sockets bound to `port` (summed), from
    /proc/net/udp and /proc/net/udp6; None when no socket is bound there."""
    found, drops, queued = False, 0, 0
    for path in ("/proc/net/udp", "/proc/net/udp6"):
        try:
            lines = open(path).read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if int(f[1].rsplit(":", 1)[1], 16) == port:
                found = True
                queued += int(f[4].split(":")[1], 16)
                drops += int(f[-1])
    return (drops, queued) if found else None


def tasks(pid):
    """Each live thread of `pid`: (its /proc directory, its name, the fields
    of its stat after the name: field 3 of proc(5) is index 0). A thread that
    ends while it is read is left out."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            stat = open(f"{base}/stat").read()
        except OSError:
            continue
        yield base, stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()


def reading_threads(by_name):
    """CPU seconds of frameloop's reading threads: `frameloop-rx` and, with
    ingest.reading_threads, `frameloop-rx1`, `frameloop-rx2`, ..."""
    return sum(v for name, v in by_name.items() if re.fullmatch(r"frameloop-rx\d*", name))


def thread_cpu(pid):
    """CPU seconds used so far by each thread of `pid`, by thread name: a
    dict of totals and one of the part spent in the kernel (system time)."""
    tick = os.sysconf("SC_CLK_TCK")
    total, system = {}, {}
    for _, name, fields in tasks(pid):
        total[name] = round(total.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick, 2)
        system[name] = round(system.get(name, 0.0) + int(fields[12]) / tick, 2)
    return total, system


def thread_sched(pid):
    """How the scheduler has treated each thread of `pid` so far, by its
    /proc directory: (name, milliseconds it waited on a run queue while
    runnable (schedstat), times it was preempted (`nonvoluntary_ctxt_switches`))."""
    threads = {}
    for base, name, _ in tasks(pid):
        try:
            wait_ns = int(open(f"{base}/schedstat").read().split()[1])
            switches = re.search(r"^nonvoluntary_ctxt_switches:\s*(\d+)", open(f"{base}/status").read(), re.M)
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while it was read
        threads[base] = (name, wait_ns / 1e6, int(switches.group(1)) if switches else 0)
    return threads


def sched_between(before, after):
    """What the scheduler did to the receiver's threads between two
    `thread_sched` readings, by thread name (threads of one name summed;
    only threads alive at both): run-queue wait in ms and preemptions. A
    receiving thread that waited or was preempted during a lossy trial lost
    its CPU to another task; one that did neither was on its CPU and fell
    behind there."""
    waited, preempted = {}, {}
    for tid, (name, wait_ms, switches) in after.items():
        if tid in before:
            waited[name] = round(waited.get(name, 0.0) + wait_ms - before[tid][1], 3)
            preempted[name] = preempted.get(name, 0) + switches - before[tid][2]
    return waited, preempted


def receiver_sched(seen):
    """A trial's fields for the receiving process as a whole: its threads'
    run-queue wait (ms) and preemptions while the sender ran, summed."""
    return dict(recv_waited_ms=round(sum(seen["waited_ms"].values()), 3),
                recv_preempted=sum(seen["preempted"].values()))


def thread_cpus_now(pid):
    """The CPU each thread of `pid` last ran on (field 39 of its stat)."""
    return [int(fields[36]) for _, _, fields in tasks(pid)]


def pinned(argv, cpus):
    """`argv` under `taskset -c cpus` (taskset execs it, so the pid stays the
    tool's own), or `argv` itself for an empty list."""
    return ["taskset", "-c", cpus] + argv if cpus else argv


def run_pair(log, recv_argv, send_argv, ready, recv_timeout, port):
    """Starts the receiver, waits until `ready()`, runs the sender, then
    waits for the receiver (SIGINT after `recv_timeout` s). Returns both
    outputs and what was seen of the receiver just after the sender finished:
    its socket's kernel drops and queue (`udp_socket_drops`) and its threads' CPU seconds."""
    log.command(recv_argv)
    recv = subprocess.Popen(recv_argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while not ready():
            if recv.poll() is not None or time.time() > deadline:
                out = recv.communicate()[0]
                raise RuntimeError(f"receiver did not come up: {' '.join(recv_argv)}\n{out}")
            time.sleep(0.05)
        # spead2_recv exits at the end of the stream, so the socket is
        # sampled while the sender runs and the last reading is kept.
        seen = dict(socket=udp_socket_drops(port), threads={}, threads_sys={}, sender_cpus={})
        sched_before = thread_sched(recv.pid)
        sending = threading.Event()
        sending.set()
        log.command(send_argv)
        send = subprocess.Popen(send_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

        def sample():
            while sending.is_set():
                reading = udp_socket_drops(port)
                if reading is not None:
                    seen["socket"] = reading
                # Where the sender's threads ran, every 50 ms.
                for cpu in thread_cpus_now(send.pid):
                    seen["sender_cpus"][cpu] = seen["sender_cpus"].get(cpu, 0) + 1
                time.sleep(0.05)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        send_out, send_err = send.communicate()
        time.sleep(0.3)  # let the receiver drain its queue
        sending.clear()
        sampler.join()
        seen["socket"] = udp_socket_drops(port) or seen["socket"]
        seen["threads"], seen["threads_sys"] = thread_cpu(recv.pid)
        seen["waited_ms"], seen["preempted"] = sched_between(sched_before, thread_sched(recv.pid))
        # The receiver's whole CPU time (every thread, start-up included) is
        # the children's rusage gained when it is reaped: the sender was
        # reaped before, and spead2_recv may have exited already.
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        try:
            recv_out = recv.communicate(timeout=recv_timeout)[0]
        except subprocess.TimeoutExpired:
            recv.send_signal(signal.SIGINT)
            try:
                recv_out = recv.communicate(timeout=10)[0]
            except subprocess.TimeoutExpired:
                recv.kill()
                recv_out = recv.communicate()[0]
    finally:
        if recv.poll() is None:
            recv.kill()
            recv.wait()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    seen["cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)
    seen["sys_cpu_s"] = round(after.ru_stime - before.ru_stime, 3)
    log.raw("sender stdout", send_out)
    if send_err.strip():
        log.raw("sender stderr", send_err[-4000:])
    log.raw("receiver output", recv_out)
    log.write(f"# receiver after the sender: socket (kernel drops, queued bytes) = {seen['socket']}, "
              f"thread CPU s = {json.dumps(seen['threads'])} (in the kernel {json.dumps(seen['threads_sys'])}), "
              f"process CPU s = {seen['cpu_s']} (in the kernel {seen['sys_cpu_s']})")
    log.write(f"# scheduling while the sender ran: receiver threads' run-queue wait ms = "
              f"{json.dumps(seen['waited_ms'])}, preemptions = {json.dumps(seen['preempted'])}; "
              f"sender's threads seen on CPU (50 ms samples) = {json.dumps(dict(sorted(seen['sender_cpus'].items())))}")
    if send.returncode != 0:
        raise RuntimeError(f"sender failed ({send.returncode}): {send_err[-2000:]}")
    return send_out, recv_out, seen


def udp_port_bound(port):
    """A UDP socket is bound to `port` (from /proc/net, so `ss` is not needed)."""
    return udp_socket_drops(port) is not None


class Spead2:
    """spead2_send -> spead2_recv. Rates are set in Gb/s of UDP payload
    (spead2's own accounting); a calibration run gives the bytes and packets
    per heap so that heaps/s equals the frames/s asked for."""

    def __init__(self, name, bindir, args, log):
        self.name, self.bin, self.args, self.log = name, bindir, args, log
        self.calibrated = {}

    def _run(self, size, heaps, gbps):
        a = self.args
        recv = [f"{self.bin}/spead2_recv", "--quiet", "--packet", str(size), "--buffer", str(a.recv_buffer),
                f"127.0.0.1:{a.port}"]
        # The pid whose CPU time and socket are read stays spead2_recv's own (see `pinned`).
        recv = pinned(recv, a.spead2_cpus)
        send = pinned([f"{self.bin}/spead2_send", "--packet", str(size), "--heap-size", str(a.frame_bytes),
                       "--heaps", str(heaps), "--rate", f"{gbps:.6f}", "--buffer", str(a.send_buffer),
                       f"127.0.0.1:{a.port}"], a.sender_cpus)
        ready_at = time.time() + 0.5
        s_out, r_out, seen = run_pair(self.log, recv, send, lambda: time.time() > ready_at, a.trial_s + 15, a.port)
        m = re.search(r"Sent (\d+) bytes in ([0-9.e+-]+) seconds", s_out)
        if not m:
            raise RuntimeError(f"unexpected spead2_send output: {s_out}")
        stats = dict((k, int(v)) for k, v in re.findall(r"^(\w+): (\d+)$", r_out, re.M))
        h = re.search(r"Received (\d+) heaps", r_out)
        stats["heaps_received"] = int(h.group(1)) if h else stats.get("heaps", 0)
        stats["kernel_drops"] = seen["socket"][0] if seen["socket"] else 0
        stats["cpu_s"], stats["sys_cpu_s"] = seen["cpu_s"], seen["sys_cpu_s"]
        stats.update(receiver_sched(seen))
        return int(m.group(1)), float(m.group(2)), stats

    def calibrate(self, size):
        if size not in self.calibrated:
            heaps = 200
            sent_bytes, _, stats = self._run(size, heaps, 1.0)
            per_heap_bytes = sent_bytes / heaps
            per_heap_packets = round(stats["packets"] / max(stats["heaps_received"], 1))
            self.calibrated[size] = (per_heap_bytes, per_heap_packets)
            self.log.write(f"# calibration {self.name} {size}: {per_heap_bytes:.0f} bytes, "
                           f"{per_heap_packets} packets per heap")
        return self.calibrated[size]

    def trial(self, size, fps):
        heap_bytes, heap_packets = self.calibrate(size)
        heaps = max(int(fps * self.args.trial_s), 10)
        gbps = fps * heap_bytes * 8 / 1e9
        sent_bytes, seconds, st = self._run(size, heaps, gbps)
        got = st["heaps_received"]
        lost_heaps = heaps - got + st.get("incomplete_heaps_evicted", 0) + st.get("incomplete_heaps_flushed", 0)
        expected_packets = heaps * heap_packets
        packets = st.get("packets", 0)
        kernel_drops = st["kernel_drops"]
        gbit = max(packets * heap_bytes / heap_packets * 8 / 1e9, 1e-9)
        return dict(offered_fps=fps, offered_pps=fps * heap_packets, offered_gbps=gbps,
                    sent_gbps=sent_bytes * 8 / seconds / 1e9, seconds=seconds,
                    rx_pps=packets / seconds, rx_gbps=packets * heap_bytes / heap_packets * 8 / seconds / 1e9,
                    kernel_drops=kernel_drops, incomplete=max(lost_heaps, 0),
                    cpu_s_per_gbit=st["cpu_s"] / gbit,
                    sys_cpu_s_per_gbit=st["sys_cpu_s"] / gbit,
                    rx_thread_cpu_s_per_gbit=None, rx_thread_sys_cpu_s_per_gbit=None,
                    recv_waited_ms=st["recv_waited_ms"], recv_preempted=st["recv_preempted"],
                    loss_pct=100.0 * max(lost_heaps, 0) / heaps,
                    clean=lost_heaps == 0 and kernel_drops == 0 and packets >= expected_packets)


def find_ingest(report):
    """The ingest counters in `frameloop run --json` output: the object
    holding `datagrams` and `frames_complete`, wherever it sits."""
    if isinstance(report, dict):
        if "datagrams" in report and "frames_complete" in report:
            return report
        for v in report.values():
            found = find_ingest(v)
            if found is not None:
                return found
    return None


def last_json(text):
    start = text.find("{")
    if start < 0:
        raise RuntimeError(f"no JSON in output:\n{text[-2000:]}")
    return json.loads(text[start:text.rfind("}") + 1])


def toml_lines(extra):
    """Extra TOML given on the command line (`\\n` for a new line) as whole
    lines to splice into a config: empty, or ending in one newline."""
    text = extra.replace("\\n", "\n").rstrip("\n")
    return text + "\n" if text else ""


class Frameloop:
    """`frameloop send` -> `frameloop run --config FILE --duration S --json`,
    configured for an ingest measurement (see the module doc and `config`)."""

    # Totals, not drops; every other ingest counter is a datagram or frame
    # dropped at ingest and counts as loss.
    DROP_KEYS_NOT_LOSS = {"datagrams", "bytes", "packets_accepted", "frames_started", "frames_complete",
                          "frames_incomplete", "frames_timed_out", "gro_segments", "placed_by_kernel",
                          "busy_poll_gaps", "assembly_waits", "stream_restarts"}

    def __init__(self, binary, args, log, realtime_priority=0, backend="", pacing=None, copy=False, split=0):
        """`split`: 0 = one thread reads and assembles; N = ingest.assembly_thread
        with N reading threads."""
        self.bin, self.args, self.log = binary, args, log
        self.pacing = pacing
        self.copy = copy
        self.split = split
        self.realtime_priority = realtime_priority
        self.backend = backend

    def slots(self):
        """ring.slots: `--frameloop-base-slots` for the -base tools where given,
        else `--frameloop-slots`, else 32 for the CUDA backend (the GPU
        claims frames as they come, and a 2 MiB ring stays in the CPU's cache)
        and 256 for the host backend (whose chain thread on 2 cores falls behind
        for longer than a small ring covers)."""
        if "-base" in self.name and self.args.frameloop_base_slots:
            return self.args.frameloop_base_slots
        if self.args.frameloop_slots:
            return self.args.frameloop_slots
        return 32 if self.backend == "cuda" else 256

    def extra(self, what):
        """TOML lines of --frameloop-base-WHAT-extra for the -base tools where
        given, else of --frameloop-WHAT-extra."""
        base = getattr(self.args, f"frameloop_base_{what}_extra")
        if "-base" in self.name and base is not None:
            return toml_lines(base)
        return toml_lines(getattr(self.args, f"frameloop_{what}_extra"))

    def config_extra(self):
        """TOML appended to the config."""
        return self.extra("config")

    def ingest_extra(self):
        """Keys added to [ingest] (either option may set `gro`, which then
        replaces --frameloop-gro)."""
        return self.extra("ingest")

    def ring_extra(self):
        """Keys added to [ring]."""
        return self.extra("ring")

    def loop_extra(self):
        """Keys added to [loop]."""
        return self.extra("loop")

    def loop_keys(self):
        """[loop] settings. The host backend's loop sleeps when no frame waits
        instead of spinning a core (`poll_budget_us = 0`), since sender,
        receiver and loop share 2 cores there. The CUDA backend's loop polls
        on the GPU, so it keeps the appliance's defaults (on an H200 host the
        process's CPU per Gbit was the same either way): with the host backend's sleep it napped 100 µs whenever it
        found no frame, fell behind 64 KiB frames coming every 15 µs, and
        held a slot long enough for ingest to find the ring full (counted as
        loss) from 36 Gb/s on an H200 host."""
        if self.backend == "cuda":
            return ""
        return f'poll_budget_us = 0\ndata_not_ready_sleep_interval_us = {self.args.frameloop_loop_sleep_us}\n'

    def config(self, size):
        """Ingest as fast as it goes: the ring never blocks ingest (`latest`,
        `--frameloop-slots` slots), the chain is the lightest (unpack u8 -> stats), and the
        resident loop set as `loop_keys` says."""
        a = self.args
        ingest_extra = self.ingest_extra()
        text = ((f'backend = "{self.backend}"\n' if self.backend else '') +
                f'[ingest]\nbind = "127.0.0.1:{a.port}"\nrecv_buffer_bytes = {a.recv_buffer}\n' +
                ('' if re.search(r'^\s*gro\s*=', ingest_extra, re.M) else
                 f'gro = {"true" if a.frameloop_gro else "false"}\n') +
                ingest_extra +
                (f'realtime_priority = {self.realtime_priority}\n' if self.realtime_priority else '') +
                ('receive_into_slots = "off"\n' if self.copy else '') +
                ('assembly_thread = true\n' if self.split else '') +
                (f'reading_threads = {self.split}\n' if self.split > 1 else '') +
                f'[ring]\nslots = {self.slots()}\nslot_bytes = {a.frame_bytes}\npolicy = "latest"\n' +
                self.ring_extra() +
                '[loop]\n' + self.loop_keys() + self.loop_extra() +
                f'[[chain]]\nop = "unpack"\nformat = "u8"\n[[chain]]\nop = "stats"\n' + self.config_extra())
        f = tempfile.NamedTemporaryFile("w", prefix="frameloop-ingest-", suffix=".toml", delete=False)
        f.write(text)
        f.close()
        self.log.raw(f"config {f.name}", text)
        return f.name

    def trial(self, size, fps):
        a = self.args
        cfg = self.config(size)
        packets_per_frame = -(-a.frame_bytes // (size - FRAMELOOP_HEADER))
        frame_wire = a.frame_bytes + packets_per_frame * FRAMELOOP_HEADER
        recv = [self.bin, "run", "--config", cfg, "--duration", str(a.trial_s + a.frameloop_slack_s), "--json"]
        send = [self.bin, "send", "--to", f"127.0.0.1:{a.port}", "--rate", f"{fps:.3f}", "--frame-bytes",
                str(a.frame_bytes), "--packet-bytes", str(size), "--duration", str(a.trial_s)]
        if self.pacing:
            # A build with --pacing also has --pattern static: the sender
            # writes the payload once, as spead2_send sends the same heap.
            send += ["--pacing", self.pacing, "--pattern", "static"]
        catch_up = a.frameloop_base_catch_up if "-base" in self.name else a.frameloop_catch_up
        if catch_up:
            send += ["--catch-up", catch_up]
        send = pinned(send, a.sender_cpus)
        try:
            s_out, r_out, seen = run_pair(self.log, recv, send, lambda: udp_port_bound(a.port),
                                          a.trial_s + a.frameloop_slack_s + 20, a.port)
        finally:
            os.unlink(cfg)
        sent = last_json(s_out)
        ingest = find_ingest(last_json(r_out))
        if ingest is None:
            raise RuntimeError("`frameloop run --json` printed no ingest counters (datagrams, frames_complete)")
        seconds = sent.get("elapsed_s") or a.trial_s
        gbit = max(ingest["bytes"] * 8 / 1e9, 1e-9)
        drops = sum(v for k, v in ingest.items() if k not in self.DROP_KEYS_NOT_LOSS and isinstance(v, int))
        kernel_drops = seen["socket"][0] if seen["socket"] else 0
        lost = max(sent["packets"] - ingest["datagrams"], 0) + drops
        incomplete = ingest["frames_incomplete"] + max(sent["frames"] - ingest["frames_complete"]
                                                       - ingest["frames_incomplete"], 0)
        return dict(offered_fps=fps, offered_pps=fps * packets_per_frame, offered_gbps=fps * frame_wire * 8 / 1e9,
                    sent_gbps=sent.get("gbit_per_s", 0.0), seconds=seconds,
                    sender_rebases=sent.get("schedule_rebases", 0), sender_skipped_frames=sent.get("skipped_frames", 0),
                    rx_pps=ingest["datagrams"] / seconds, rx_gbps=ingest["bytes"] * 8 / seconds / 1e9,
                    kernel_drops=kernel_drops, incomplete=incomplete,
                    cpu_s_per_gbit=seen["cpu_s"] / gbit,
                    sys_cpu_s_per_gbit=seen["sys_cpu_s"] / gbit,
                    rx_thread_cpu_s_per_gbit=reading_threads(seen["threads"]) / gbit,
                    rx_thread_sys_cpu_s_per_gbit=reading_threads(seen["threads_sys"]) / gbit,
                    asm_thread_cpu_s_per_gbit=seen["threads"]["frameloop-asm"] / gbit
                    if "frameloop-asm" in seen["threads"] else None,
                    **receiver_sched(seen),
                    rx_thread_waited_ms=seen["waited_ms"].get("frameloop-rx"),
                    rx_thread_preempted=seen["preempted"].get("frameloop-rx"),
                    loss_pct=100.0 * lost / max(sent["packets"], 1),
                    clean=lost == 0 and kernel_drops == 0 and incomplete == 0
                    and ingest["frames_complete"] >= sent["frames"])


def search_steps(tool, size, args, log):
    """Doubling ladder from --start-gbps until loss (or until the sender
    cannot reach the offered rate), then bisection between clean and lossy.
    A generator that pauses after every trial (so several tools' searches
    can take turns) and returns (best trial, whether any trial was clean,
    what ended the ladder: "loss" when an offer lost datagrams or frames,
    so the best clean rate is the receiver's limit; "sender" when the
    sender reached no higher rate and nothing was lost, so the receiver's
    limit lies above it; "max" when every offer up to --max-gbps was clean)."""
    frame_wire = args.frame_bytes * size / (size - FRAMELOOP_HEADER)  # about the bytes of one frame on the wire
    fps_of = lambda gbps: gbps * 1e9 / 8 / frame_wire
    trials, good, bad, prev_sent, limit = [], None, None, 0.0, "max"
    load = lambda: open("/proc/loadavg").read().split()[0]
    gbps = args.start_gbps
    def at(gbps):
        # --repeats trials at one offer (a generator pausing after each):
        # the offer is clean when most of them were, and counts as the
        # trial of the median received rate among those that agree.
        runs = []
        for _ in range(args.repeats):
            r = tool.trial(size, fps_of(gbps))
            runs.append(r)
            log.write(f"# {tool.name} {size} B offered {gbps:.2f} Gb/s: {'clean' if r['clean'] else 'LOSS'} "
                      f"load {load()} {json.dumps(r)}")
            yield
        clean_trials = sum(r["clean"] for r in runs)
        clean = clean_trials * 2 > len(runs)
        agree = sorted((r for r in runs if r["clean"] == clean), key=lambda r: r["rx_pps"])
        r = dict(agree[len(agree) // 2], clean=clean, clean_trials=clean_trials, trials=len(runs))
        if args.repeats > 1:
            log.write(f"# {tool.name} {size} B offered {gbps:.2f} Gb/s: {clean_trials} of {len(runs)} "
                      f"trials clean: {'clean' if clean else 'LOSS'}")
        return r

    while gbps <= args.max_gbps:
        r = yield from at(gbps)
        trials.append(r)
        if r["clean"] and r["sent_gbps"] < args.sender_bound * prev_sent:
            # Doubling the offer no longer raises what the sender achieves:
            # it is CPU-bound here and higher offers only lengthen the trials.
            log.write(f"# {tool.name} {size} B: sender-bound at {r['sent_gbps']:.2f} Gb/s; ladder stops")
            good, limit = gbps, "sender"
            break
        prev_sent = r["sent_gbps"]
        if r["clean"]:
            good = gbps
            gbps *= 2
        else:
            bad, limit = gbps, "loss"
            break
    if good is not None and bad is not None:
        for _ in range(args.bisect_steps):
            mid = (good + bad) / 2
            r = yield from at(mid)
            trials.append(r)
            if r["clean"]:
                good = mid
            else:
                bad = mid
    clean = [t for t in trials if t["clean"]]
    best = max(clean, key=lambda t: t["rx_pps"]) if clean else min(trials, key=lambda t: t["loss_pct"])
    return best, bool(clean), limit


def run_searches(tools, size, args, log):
    """Every tool's search at one datagram size: with --interleave the tools
    take turns, one trial each, so that a slow stretch of the machine falls
    on all of them alike; otherwise one tool's whole search after another.
    Returns [(tool name, best trial, clean, limit)] in the order of `tools`."""
    searches = [(tool.name, search_steps(tool, size, args, log)) for tool in tools]
    done = {}
    groups = [searches] if args.interleave else [[s] for s in searches]
    for pending in groups:
        while pending:
            for item in list(pending):
                name, steps = item
                try:
                    next(steps)
                except StopIteration as finished:
                    done[name] = finished.value
                    pending.remove(item)
    return [(tool.name, *done[tool.name]) for tool in tools]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", default="spead2,spead2-nogso,frameloop,frameloop-rt")
    p.add_argument("--sizes", default="8972,1472", help="datagram sizes in bytes (UDP payload)")
    p.add_argument("--frame-bytes", type=int, default=65536, help="frame (spead2: heap) payload bytes")
    p.add_argument("--trial-s", type=float, default=2.0, help="seconds of traffic per trial")
    p.add_argument("--start-gbps", type=float, default=1.0)
    p.add_argument("--max-gbps", type=float, default=64.0)
    p.add_argument("--bisect-steps", type=int, default=4)
    p.add_argument("--repeats", type=int, default=1,
                   help="trials at each offered rate (odd: the rate is clean when most of them are), so that one "
                        "stall of the host does not decide a rate")
    p.add_argument("--interleave", type=int, default=1,
                   help="1 (the default): the tools' searches take turns, one trial each, so that a slow stretch "
                        "of a shared machine falls on every tool alike; 0: one tool's whole search after another")
    p.add_argument("--sender-bound", type=float, default=1.15,
                   help="the ladder stops when doubling the offer raised the achieved send rate by less than this factor")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--recv-buffer", type=int, default=4 << 20, help="receive socket buffer, bytes")
    p.add_argument("--send-buffer", type=int, default=4 << 20, help="spead2 send socket buffer, bytes")
    p.add_argument("--spead2-bin", default=os.path.join(HERE, "spead2/build/bin"))
    p.add_argument("--spead2-nogso-bin", default=os.path.join(HERE, "spead2/build/bin-nogso"))
    p.add_argument("--spead2-cpus", default="",
                   help="run spead2_recv under `taskset -c` with this CPU list (its tool has no affinity "
                        "option; all its threads share the list), e.g. 3,7 to match frameloop's "
                        "[service] receiver_cpu = 3, result_cpu = 7; empty (the default): unpinned")
    p.add_argument("--sender-cpus", default="",
                   help="run both tools' senders under `taskset -c` with this CPU list, e.g. 1,5, away from the "
                        "receivers' CPUs, so that where the scheduler puts the sender does not decide a trial "
                        "(on loopback the sender's CPU also runs the kernel's receive path into the socket); "
                        "empty (the default): unpinned")
    p.add_argument("--frameloop", default=os.path.join(HERE, "../target/release/frameloop"))
    p.add_argument("--frameloop-base", help="a second frameloop binary, run by the frameloop-base* tools")
    p.add_argument("--frameloop-pacing", default="sleep",
                   help="`frameloop send --pacing`: sleep (the default here: like spead2_send, the sender does "
                        "not spin a core between frames) or spin")
    p.add_argument("--frameloop-catch-up", default="1.05",
                   help="`frameloop send --catch-up` for the frameloop tools other than -base (empty: the sender's "
                        "default, 1.25): how fast a sender behind its schedule sends what it owes, as a multiple of "
                        "the rate. The default, 1.05, is spead2_send's (its default burst rate ratio), so that a "
                        "sender that woke late loads both receivers alike")
    p.add_argument("--frameloop-base-catch-up",
                   help="--catch-up for the --frameloop-base binary's sender (empty: none, for builds without it; "
                        "not given: as --frameloop-catch-up when both are the same binary, else none)")
    p.add_argument("--frameloop-base-pacing",
                   help="--pacing for the --frameloop-base binary's sender (empty: none, for builds without it; "
                        "not given: as --frameloop-pacing when both are the same binary, else none). A sender "
                        "without it writes a fresh payload into every frame and sent at most 29-32 Gb/s on an "
                        "H200 host where the other sent 36")
    p.add_argument("--frameloop-base-slots", type=int, default=0,
                   help="ring.slots for the -base tools (0: as --frameloop-slots), so that one binary can be "
                        "compared with itself at two ring sizes")
    p.add_argument("--frameloop-gro", type=int, default=1, help="[ingest] gro in frameloop's config (1/0)")
    p.add_argument("--frameloop-slots", type=int, default=0,
                   help="ring.slots in frameloop's config; 0 (the default): 32 for the -cuda tools, 256 otherwise. "
                        "Fewer slots keep the ring in the CPU's cache (on the 2-core machine the copy into a slot took "
                        "20 against 83 ns per 1,472-byte datagram with 16 slots of 64 KiB against 256; on an H200 host "
                        "the CUDA backend held 36.0 against 28.0 Gb/s at 8,972 B with 32 against 256), but the host "
                        "backend on 2 cores ran out of free slots with 16 or 64 (ring_full, counted as loss)")
    p.add_argument("--frameloop-slack-s", type=float, default=3.0,
                   help="receiver runs this much longer than the sender (start-up and drain)")
    p.add_argument("--frameloop-loop-sleep-us", type=int, default=100,
                   help="[loop] data_not_ready_sleep_interval_us of the host backend: its loop's sleep when no frame waits")
    p.add_argument("--frameloop-rt-priority", type=int, default=10,
                   help="ingest.realtime_priority (SCHED_FIFO) of the frameloop-rt tool")
    p.add_argument("--frameloop-ingest-extra", default="",
                   help="keys added to frameloop's [ingest] table, one per line (\\n between lines), "
                        "e.g. 'realtime_priority = 10\\n'")
    p.add_argument("--frameloop-base-ingest-extra",
                   help="keys added to the -base tools' [ingest] instead of --frameloop-ingest-extra (a "
                        "before/after pair of receive settings with one binary, e.g. 'gro = false\\n"
                        "receive_into_slots = \"on\"')")
    p.add_argument("--frameloop-ring-extra", default="",
                   help="keys added to frameloop's [ring] table, e.g. 'huge_pages = false'")
    p.add_argument("--frameloop-base-ring-extra",
                   help="keys added to the -base tools' [ring] instead of --frameloop-ring-extra")
    p.add_argument("--frameloop-loop-extra", default="",
                   help="keys added to frameloop's [loop] table, one per line (\\n between lines), e.g. 'host_nice = 19'")
    p.add_argument("--frameloop-base-loop-extra",
                   help="keys added to the -base tools' [loop] instead of --frameloop-loop-extra")
    p.add_argument("--frameloop-config-extra", default="",
                   help="TOML appended to frameloop's config (\\n between lines), e.g. '[service]\\nreceiver_cpu = 2'")
    p.add_argument("--frameloop-base-config-extra",
                   help="TOML appended to the config of the -base tools instead of --frameloop-config-extra "
                        "(a before/after pair of settings with one binary)")
    p.add_argument("--out", help="results file (raw output and command lines)")
    args = p.parse_args()
    # A before/after pair of settings with one binary gets one sender.
    same_binary = bool(args.frameloop_base) and all(map(os.path.exists, (args.frameloop, args.frameloop_base))) and \
        os.path.samefile(args.frameloop, args.frameloop_base)
    if args.frameloop_base_catch_up is None:
        args.frameloop_base_catch_up = args.frameloop_catch_up if same_binary else ""
    if args.frameloop_base_pacing is None:
        args.frameloop_base_pacing = args.frameloop_pacing if same_binary else ""
    if args.repeats < 1:
        sys.exit(f"--repeats {args.repeats}: give at least 1 trial per offered rate")

    log = Log(args.out)
    log.write(f"# ingest throughput over loopback, {datetime.datetime.now().isoformat(timespec='seconds')}")
    log.write(f"# command: {' '.join(shlex.quote(a) for a in sys.argv)}")
    for cmd in (["uname", "-r"], ["nproc"], ["sysctl", "net.core.rmem_max", "net.core.wmem_max"]):
        log.write(f"# {' '.join(cmd)}: " + subprocess.run(cmd, capture_output=True, text=True).stdout.strip().replace("\n", "; "))
    if os.environ.get("SYSCTL_NOTE"):
        log.write(f"# sysctl: {os.environ['SYSCTL_NOTE']}")
    log.write(f"# settings: {json.dumps(vars(args))}")

    tools = []
    for name in args.tools.split(","):
        if name == "spead2":
            tools.append(Spead2("spead2", args.spead2_bin, args, log))
        elif name == "spead2-nogso":
            tools.append(Spead2("spead2-nogso", args.spead2_nogso_bin, args, log))
        elif m := re.fullmatch(r"frameloop(-base)?(-rt)?(-copy)?(-split(\d*))?(-host|-cuda)?", name):
            # -base: the --frameloop-base binary (a before/after pair in one run);
            # -rt: SCHED_FIFO receiving thread; -copy: ingest.receive_into_slots = "off"
            # (every payload copied from the receive buffer); -split: ingest.assembly_thread = true,
            # -splitN: with N reading threads; -host/-cuda: that backend (default: auto).
            if "-base" in name and not args.frameloop_base:
                sys.exit(f"tool {name} needs --frameloop-base BINARY")
            binary = args.frameloop_base if "-base" in name else args.frameloop
            backend = "cuda" if name.endswith("-cuda") else "host" if name.endswith("-host") else ""
            t = Frameloop(os.path.abspath(binary), args, log,
                          realtime_priority=args.frameloop_rt_priority if "-rt" in name else 0, backend=backend,
                          pacing=args.frameloop_base_pacing if "-base" in name else args.frameloop_pacing,
                          copy="-copy" in name, split=int(m.group(5) or 1) if m.group(4) else 0)
            t.name = name
            tools.append(t)
        else:
            sys.exit(f"unknown tool {name}: use spead2, spead2-nogso, "
                     "frameloop[-base][-rt][-copy][-split[N]][-host|-cuda]")

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for name, best, clean, limit in run_searches(tools, size, args, log):
            rows.append((name, size, best, clean, limit))

    header = (f"{'tool':<22}{'datagram B':>11}{'offered pkt/s':>15}{'offered Gb/s':>14}{'rx pkt/s':>12}"
              f"{'rx Gb/s':>9}{'loss %':>8}{'CPU s/Gb':>10}{'sys s/Gb':>10}{'rx thr s/Gb':>12}{'rx sys s/Gb':>12}"
              f"{'asm s/Gb':>10}{'limit':>8}  vs spead2")
    lines = ["", "highest rate without loss (loopback, "
             f"{args.frame_bytes}-byte frames, {args.trial_s:g} s per trial; loss = datagrams the kernel dropped "
             "or the receiver did not count, or frames incomplete; frames the consumer skipped are not loss;\n"
             "CPU s/Gb = the receiving process's CPU seconds (all threads, start-up included) per Gbit received; "
             "sys s/Gb = the part of it spent in the kernel; rx thr s/Gb, rx sys s/Gb = the same for frameloop's "
             "receiving thread alone (all its reading threads, with ingest.reading_threads); asm s/Gb = its assembly "
             "thread's, with ingest.assembly_thread;\n"
             "limit = what ended the search: loss = a higher offer lost datagrams or frames, so the rate shown is the "
             "receiver's limit; sender = the sender reached no higher rate and nothing was lost, so the receiver's "
             "limit lies above it (a ratio against a receiver limited by loss is then a lower bound, marked >=); "
             "max = clean up to --max-gbps):",
             header]
    for name, size, b, clean, limit in rows:
        ref = next(((r, lim) for n, s, r, _, lim in rows if n == "spead2" and s == size), None)
        ratio = "-"
        if ref and name != "spead2" and ref[0]["rx_pps"]:
            bound = ">=" if limit != "loss" and ref[1] == "loss" else ""
            ratio = f"{bound}{b['rx_pps'] / ref[0]['rx_pps']:.2f}"
        note = "" if clean else "  (no clean trial: least loss shown)"
        per_gbit = lambda key: "-" if b.get(key) is None else f"{b[key]:.3f}"
        lines.append(f"{name:<22}{size:>11}{b['offered_pps']:>15.0f}{b['offered_gbps']:>14.2f}{b['rx_pps']:>12.0f}"
                     f"{b['rx_gbps']:>9.2f}{b['loss_pct']:>8.3f}{b['cpu_s_per_gbit']:>10.3f}"
                     f"{per_gbit('sys_cpu_s_per_gbit'):>10}{per_gbit('rx_thread_cpu_s_per_gbit'):>12}"
                     f"{per_gbit('rx_thread_sys_cpu_s_per_gbit'):>12}{per_gbit('asm_thread_cpu_s_per_gbit'):>10}"
                     f"{limit:>8}  {ratio}{note}")
    table = "\n".join(lines)
    print(table)
    log.write(table)


if __name__ == "__main__":
    main()
