#!/usr/bin/env python3
"""Attaches to a frameloop appliance's output ring as a PyTorch consumer and
checks every output against the CPU chain, without copying any frame on the
way to the tensor.

For each output: the time from the frame's publish into the frame ring to
this process holding the tensor (`torch.from_dlpack(frame)`, no copy: its
data pointer must be the ring slot's device address), then, for the check
only, a copy of the samples to the host compared with the config's chain run
on the CPU over the payload `frameloop send --pattern P` sent for that
frame. Prints percentiles of publish-to-tensor and the counts; exits 1 when
an output is wrong, missing or not read in place. With --latency-only it
skips the copy and the check (so a slow check never delays the next pickup)
and prints publish-to-frame (`next()` returned) next to publish-to-tensor.

    python3 bench/output/check_consumer.py --socket S --config C --frame-bytes N --count 10000
"""

import argparse
import sys
import time

import numpy as np
import torch
import torch.utils.dlpack

import frameloop


def percentiles(values):
    v = sorted(values)
    if not v:
        return "no samples"
    q = lambda p: v[min(len(v) - 1, int(p * len(v)))] / 1e3
    return f"p50 {q(0.5):.1f} p90 {q(0.9):.1f} p99 {q(0.99):.1f} p99.9 {q(0.999):.1f} max {v[-1] / 1e3:.1f} over {len(v)}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--config", required=True, help="the appliance's config (its [[chain]] is the reference)")
    ap.add_argument("--frame-bytes", type=int, required=True)
    ap.add_argument("--pattern", default="random", choices=["counter", "random"])
    ap.add_argument("--count", type=int, default=10000)
    ap.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
    ap.add_argument("--spin-us", type=float, default=None, help="spin budget of a wait (default: spin while waiting)")
    ap.add_argument("--latency-only", action="store_true", help="hold each tensor, check its address, skip the CPU check")
    ap.add_argument("--release-early", action="store_true",
                    help="drop each frame and tensor before waiting for the next (not when the next arrives)")
    ap.add_argument("--slot-views", action="store_true",
                    help="export each ring slot once (Consumer.slot_views()) and take tensors[frame.slot][:len(frame)]")
    ap.add_argument("--capsule", action="store_true",
                    help="make the tensor from the frame's capsule (torch.utils.dlpack.from_dlpack(frame.__dlpack__())) "
                         "instead of torch.from_dlpack(frame)")
    args = ap.parse_args()

    torch.zeros(1, device="cuda")  # the CUDA context, before attaching
    reference = frameloop.ReferenceChain(args.config, args.frame_bytes)
    consumer = frameloop.Consumer(args.socket, spin_us=args.spin_us)
    print(f"attached: {consumer.slots} slots, device {consumer.device}", flush=True)
    slot_tensors = [torch.from_dlpack(v) for v in consumer.slot_views()] if args.slot_views else None
    views = {}
    held_ns, framed_ns, checked, bad, not_in_place, overwritten = [], [], 0, 0, 0, 0
    last = None
    start = time.time()
    while consumer.read + consumer.lost < args.count and time.time() - start < args.timeout:
        frame = consumer.next(timeout=1.0)
        if frame is None:
            if consumer.appliance_gone:
                break
            continue
        framed = time.time_ns()
        if slot_tensors is not None:
            # One view per (slot, length), made the first time it is needed:
            # a frame then costs a dictionary lookup, not a tensor slice.
            key = (frame.slot, len(frame))
            tensor = views.get(key)
            if tensor is None:
                tensor = views[key] = slot_tensors[key[0]][: key[1]]
        elif args.capsule:
            tensor = torch.utils.dlpack.from_dlpack(frame.__dlpack__())
        else:
            tensor = torch.from_dlpack(frame)
        held = time.time_ns()
        if tensor.data_ptr() != frame.data_ptr or not tensor.is_cuda:
            not_in_place += 1
        if args.latency_only:
            if not frame.valid():
                overwritten += 1
                continue
            framed_ns.append(framed - frame.published_ns)
            held_ns.append(held - frame.published_ns)
            checked += 1
            last = frame
            if args.release_early:
                del tensor, frame
            continue
        got = tensor.cpu().numpy()
        if not frame.valid():
            overwritten += 1
            continue
        held_ns.append(held - frame.published_ns)
        payload = frameloop.sender_frame(frame.frame_seq, args.frame_bytes, frame.stream_id, args.pattern)
        want = np.frombuffer(reference.run(payload), dtype=np.float32)
        scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
        if got.shape != want.shape or not np.all(np.abs(got - want) <= 1e-5 * scale):
            bad += 1
            if bad <= 5:
                diff = "shape" if got.shape != want.shape else float(np.abs(got - want).max())
                print(f"output {frame.sequence} (frame {frame.frame_seq}) differs from the CPU chain: {diff}")
        checked += 1
    if framed_ns:
        print(f"publish->frame us: {percentiles(framed_ns)}")
    print(f"publish->tensor us: {percentiles(held_ns)}")
    if last is not None:
        # What one torch.from_dlpack of a frame costs here, alone.
        cost = []
        for _ in range(2000):
            t0 = time.perf_counter_ns()
            torch.from_dlpack(last)
            cost.append(time.perf_counter_ns() - t0)
        print(f"torch.from_dlpack alone us: {percentiles(cost)}")
    print(f"checked {checked} bad {bad} not_in_place {not_in_place} overwritten {overwritten} "
          f"read {consumer.read} lost {consumer.lost}")
    ok = checked == args.count and bad == 0 and not_in_place == 0 and consumer.lost == 0
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
