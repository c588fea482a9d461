#!/usr/bin/env python3
"""Ingest throughput over loopback: frameloop against spead2's C++ tools.

For each tool and datagram size, finds the highest offered rate at which the
receiver loses nothing: a doubling ladder of offered rates until the first
loss, then bisection between the last clean and the first lossy rate. Both
tools get the same traffic pattern: datagrams of the same size, frames
(spead2: heaps) of the same size, the same frames per second.

Tools:
  spead2        spead2_send -> spead2_recv, built with UDP GSO/GRO
  spead2-nogso  the same tools built without GSO/GRO
  frameloop     `frameloop send` -> `frameloop run` (host backend)

Run it through bench/ingest_compare.sh, which builds what is missing.
"""

import argparse
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
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


def run_pair(log, recv_argv, send_argv, ready, recv_timeout):
    """Starts the receiver, waits until `ready()`, runs the sender, then
    waits for the receiver (SIGINT after `recv_timeout` s). Returns both outputs."""
    log.command(recv_argv)
    recv = subprocess.Popen(recv_argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 30
        while not ready():
            if recv.poll() is not None or time.time() > deadline:
                out = recv.communicate()[0]
                raise RuntimeError(f"receiver did not come up: {' '.join(recv_argv)}\n{out}")
            time.sleep(0.05)
        log.command(send_argv)
        send = subprocess.run(send_argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
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
    log.raw("sender stdout", send.stdout)
    if send.stderr.strip():
        log.raw("sender stderr", send.stderr[-4000:])
    log.raw("receiver output", recv_out)
    if send.returncode != 0:
        raise RuntimeError(f"sender failed ({send.returncode}): {send.stderr[-2000:]}")
    return send.stdout, recv_out


def udp_port_bound(port):
    out = subprocess.run(["ss", "-Hulnp", f"sport = :{port}"], capture_output=True, text=True).stdout
    return bool(out.strip())


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
        send = [f"{self.bin}/spead2_send", "--packet", str(size), "--heap-size", str(a.frame_bytes),
                "--heaps", str(heaps), "--rate", f"{gbps:.6f}", "--buffer", str(a.send_buffer),
                f"127.0.0.1:{a.port}"]
        ready_at = time.time() + 0.5
        s_out, r_out = run_pair(self.log, recv, send, lambda: time.time() > ready_at, a.trial_s + 15)
        m = re.search(r"Sent (\d+) bytes in ([0-9.e+-]+) seconds", s_out)
        if not m:
            raise RuntimeError(f"unexpected spead2_send output: {s_out}")
        stats = dict((k, int(v)) for k, v in re.findall(r"^(\w+): (\d+)$", r_out, re.M))
        h = re.search(r"Received (\d+) heaps", r_out)
        stats["heaps_received"] = int(h.group(1)) if h else stats.get("heaps", 0)
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
        return dict(offered_fps=fps, offered_pps=fps * heap_packets, offered_gbps=gbps,
                    sent_gbps=sent_bytes * 8 / seconds / 1e9, seconds=seconds,
                    rx_pps=packets / seconds, rx_gbps=packets * heap_bytes / heap_packets * 8 / seconds / 1e9,
                    loss_pct=100.0 * max(lost_heaps, 0) / heaps,
                    clean=lost_heaps == 0 and packets >= expected_packets)


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


class Frameloop:
    """`frameloop send` -> `frameloop run --config FILE --duration S --json`."""

    DROP_KEYS_NOT_LOSS = {"datagrams", "bytes", "packets_accepted", "frames_started", "frames_complete",
                          "frames_incomplete", "frames_timed_out", "gro_segments"}

    def __init__(self, binary, args, log):
        self.bin, self.args, self.log = binary, args, log

    def config(self, size):
        a = self.args
        text = (f'[ingest]\nbind = "127.0.0.1:{a.port}"\nrecv_buffer_bytes = {a.recv_buffer}\n'
                f'gro = {"true" if a.frameloop_gro else "false"}\n'
                f'[ring]\nslots = 256\nslot_bytes = {a.frame_bytes}\npolicy = "latest"\n' + a.frameloop_config_extra)
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
        try:
            s_out, r_out = run_pair(self.log, recv, send, lambda: udp_port_bound(a.port),
                                    a.trial_s + a.frameloop_slack_s + 20)
        finally:
            os.unlink(cfg)
        sent = last_json(s_out)
        ingest = find_ingest(last_json(r_out))
        if ingest is None:
            raise RuntimeError("`frameloop run --json` printed no ingest counters (datagrams, frames_complete)")
        seconds = sent.get("elapsed_s") or a.trial_s
        drops = sum(v for k, v in ingest.items() if k not in self.DROP_KEYS_NOT_LOSS and isinstance(v, int))
        lost = max(sent["packets"] - ingest["datagrams"], 0) + drops
        return dict(offered_fps=fps, offered_pps=fps * packets_per_frame, offered_gbps=fps * frame_wire * 8 / 1e9,
                    sent_gbps=sent.get("gbit_per_s", 0.0), seconds=seconds,
                    rx_pps=ingest["datagrams"] / seconds, rx_gbps=ingest["bytes"] * 8 / seconds / 1e9,
                    loss_pct=100.0 * lost / max(sent["packets"], 1),
                    clean=lost == 0 and ingest["frames_complete"] >= sent["frames"])


def search(tool, size, args, log):
    """Doubling ladder from --start-gbps until loss (or until the sender
    cannot reach the offered rate), then bisection between clean and lossy."""
    frame_wire = args.frame_bytes * size / (size - FRAMELOOP_HEADER)  # about the bytes of one frame on the wire
    fps_of = lambda gbps: gbps * 1e9 / 8 / frame_wire
    trials, good, bad, prev_sent = [], None, None, 0.0
    load = lambda: open("/proc/loadavg").read().split()[0]
    gbps = args.start_gbps
    while gbps <= args.max_gbps:
        r = tool.trial(size, fps_of(gbps))
        trials.append(r)
        log.write(f"# {tool.name} {size} B offered {gbps:.2f} Gb/s: {'clean' if r['clean'] else 'LOSS'} "
                  f"load {load()} {json.dumps(r)}")
        if r["clean"] and r["sent_gbps"] < args.sender_bound * prev_sent:
            # Doubling the offer no longer raises what the sender achieves:
            # it is CPU-bound here and higher offers only lengthen the trials.
            log.write(f"# {tool.name} {size} B: sender-bound at {r['sent_gbps']:.2f} Gb/s; ladder stops")
            good = gbps
            break
        prev_sent = r["sent_gbps"]
        if r["clean"]:
            good = gbps
            gbps *= 2
        else:
            bad = gbps
            break
    if good is not None and bad is not None:
        for _ in range(args.bisect_steps):
            mid = (good + bad) / 2
            r = tool.trial(size, fps_of(mid))
            trials.append(r)
            log.write(f"# {tool.name} {size} B offered {mid:.2f} Gb/s: {'clean' if r['clean'] else 'LOSS'} "
                      f"load {load()} {json.dumps(r)}")
            if r["clean"]:
                good = mid
            else:
                bad = mid
    clean = [t for t in trials if t["clean"]]
    best = max(clean, key=lambda t: t["rx_pps"]) if clean else min(trials, key=lambda t: t["loss_pct"])
    return best, bool(clean)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tools", default="spead2,spead2-nogso,frameloop")
    p.add_argument("--sizes", default="8972,1472", help="datagram sizes in bytes (UDP payload)")
    p.add_argument("--frame-bytes", type=int, default=65536, help="frame (spead2: heap) payload bytes")
    p.add_argument("--trial-s", type=float, default=2.0, help="seconds of traffic per trial")
    p.add_argument("--start-gbps", type=float, default=1.0)
    p.add_argument("--max-gbps", type=float, default=64.0)
    p.add_argument("--bisect-steps", type=int, default=4)
    p.add_argument("--sender-bound", type=float, default=1.15,
                   help="the ladder stops when doubling the offer raised the achieved send rate by less than this factor")
    p.add_argument("--port", type=int, default=8888)
    p.add_argument("--recv-buffer", type=int, default=4 << 20, help="receive socket buffer, bytes")
    p.add_argument("--send-buffer", type=int, default=4 << 20, help="spead2 send socket buffer, bytes")
    p.add_argument("--spead2-bin", default=os.path.join(HERE, "spead2/build/bin"))
    p.add_argument("--spead2-nogso-bin", default=os.path.join(HERE, "spead2/build/bin-nogso"))
    p.add_argument("--frameloop", default=os.path.join(HERE, "../target/release/frameloop"))
    p.add_argument("--frameloop-gro", type=int, default=1, help="[ingest] gro in frameloop's config (1/0)")
    p.add_argument("--frameloop-slack-s", type=float, default=3.0,
                   help="receiver runs this much longer than the sender (start-up and drain)")
    p.add_argument("--frameloop-config-extra", default="", help="TOML appended to frameloop's config")
    p.add_argument("--out", help="results file (raw output and command lines)")
    args = p.parse_args()

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
        elif name == "frameloop":
            t = Frameloop(os.path.abspath(args.frameloop), args, log)
            t.name = "frameloop"
            tools.append(t)
        else:
            sys.exit(f"unknown tool {name}: use spead2, spead2-nogso, frameloop")

    rows = []
    for size in (int(s) for s in args.sizes.split(",")):
        for tool in tools:
            best, clean = search(tool, size, args, log)
            rows.append((tool.name, size, best, clean))

    header = (f"{'tool':<14}{'datagram B':>11}{'offered pkt/s':>15}{'offered Gb/s':>14}{'rx pkt/s':>12}"
              f"{'rx Gb/s':>9}{'loss %':>8}  vs spead2")
    lines = ["", "highest rate without loss (loopback, "
             f"{args.frame_bytes}-byte frames, {args.trial_s:g} s per trial):", header]
    for name, size, b, clean in rows:
        ref = next((r for n, s, r, _ in rows if n == "spead2" and s == size), None)
        ratio = f"{b['rx_pps'] / ref['rx_pps']:.2f}" if ref and name != "spead2" and ref["rx_pps"] else "-"
        note = "" if clean else "  (no clean trial: least loss shown)"
        lines.append(f"{name:<14}{size:>11}{b['offered_pps']:>15.0f}{b['offered_gbps']:>14.2f}{b['rx_pps']:>12.0f}"
                     f"{b['rx_gbps']:>9.2f}{b['loss_pct']:>8.3f}  {ratio}{note}")
    table = "\n".join(lines)
    print(table)
    log.write(table)


if __name__ == "__main__":
    main()
