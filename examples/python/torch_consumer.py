#!/usr/bin/env python3
"""Runs a small PyTorch model on every output of a frameloop appliance as it
arrives, on the ring's memory without a copy: CPU tensors when the output
ring is host memory (host backend), CUDA tensors when it is device memory.

    pip install ./python torch
    python3 examples/python/torch_consumer.py --socket /run/frameloop/output.sock

Prints, per output: sequence, the sender's frame number, the latency from
the frame's publish into the frame ring to the model's result, and the result.
"""

import argparse
import time

import torch

import frameloop


class Detector(torch.nn.Module):
    """A 1-D convolution over the samples, pooled to a fixed size, then a
    linear layer: two scores per frame. Untrained: what matters here is the
    data path."""

    def __init__(self, channels=8, pooled=32):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, channels, kernel_size=9, padding=4)
        self.pool = torch.nn.AdaptiveAvgPool1d(pooled)
        self.head = torch.nn.Linear(channels * pooled, 2)

    def forward(self, samples):
        x = samples.view(1, 1, -1)                       # (batch, channel, samples)
        x = self.pool(torch.relu(self.conv(x)))
        return self.head(x.flatten(1))[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--socket", default="/run/frameloop/output.sock", help="the appliance's output.socket")
    parser.add_argument("--count", type=int, default=0, help="stop after this many outputs (0: run until the appliance stops)")
    args = parser.parse_args()

    consumer = frameloop.Consumer(args.socket)
    print(f"attached to {args.socket}: {consumer.slots} slots of up to {consumer.capacity} samples "
          f"in {consumer.device} memory")
    # Each ring slot as a tensor, exported once: an output is then a slice of
    # its slot's tensor (no copy, and no DLPack export per output).
    slots = [torch.from_dlpack(slot) for slot in consumer.slot_views()]
    device = slots[0].device                       # cpu, or the ring's cuda:N
    model = Detector().eval().to(device)

    seen = 0
    with torch.inference_mode():
        for frame in consumer:
            # The output's samples in its slot (read-only, the appliance's).
            # torch.from_dlpack(frame) gives the same tensor, at more cost.
            samples = slots[frame.slot][: len(frame)]
            scores = model(samples)
            if device.type == "cuda":
                torch.cuda.current_stream().synchronize()
            # Only trust the result if the appliance did not reuse the slot meanwhile.
            if not frame.valid():
                print(f"seq {frame.sequence}: overwritten while the model ran (fell {consumer.slots} behind)")
                continue
            latency_us = (time.time_ns() - frame.published_ns) / 1e3
            print(
                f"seq {frame.sequence} frame {frame.frame_seq} len {len(frame)} "
                f"publish_to_result_us {latency_us:.1f} scores {scores.tolist()} "
                f"mean {frame.stats.mean:.3f} lost {consumer.lost}"
            )
            seen += 1
            if args.count and seen >= args.count:
                break
    print(f"read {consumer.read} lost {consumer.lost}")


if __name__ == "__main__":
    main()
