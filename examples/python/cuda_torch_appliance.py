#!/usr/bin/env python3
"""Runs a frameloop appliance on the CUDA backend inside this Python process,
sends it frames, runs a small PyTorch model on every output in place (the
output ring's GPU memory, no copy), changes the user kernel's gain live,
plots the latency percentile distribution and an output frame, and stops.

    pip install ./python torch matplotlib
    python3 examples/python/cuda_torch_appliance.py --frames 2000 --plots /tmp/frameloop-plots

Needs a CUDA GPU and NVRTC (the CUDA 13 toolkit, or the nvidia-cuda-nvrtc
wheel with its lib directory on LD_LIBRARY_PATH). The same steps on the host
backend, without a GPU: examples/python/frameloop_host.ipynb.
"""

import argparse
import os
import tempfile

# The resident graph never ends, so nothing may wait for the whole GPU: no
# torch.cuda.synchronize() while the appliance runs (synchronize a stream of
# your own), and no lazy loading of PyTorch's kernels, since loading a module
# waits for the context. Load them all when PyTorch starts.
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

import numpy as np  # noqa: E402
import torch  # noqa: E402

import frameloop  # noqa: E402

SAMPLES = 8191  # u16 samples per frame

# A user kernel given as a string: y = x * gain + offset; user word 0 counts
# the samples above `limit`.
GAIN_KERNEL = r"""
#include "frameloop.cuh"
struct Gain { float gain; float offset; float limit; };
extern "C" __global__ void gain(const fl_frame* frame, const float* in, float* out, const void* params,
                                fl_user_result* user) {
  const Gain* p = FL_PARAMS(Gain, params);
  const uint32_t i = fl_thread_index();
  if (i < frame->out_count) {
    const float y = i < frame->in_count ? in[i] * p->gain + p->offset : 0.0f;
    out[i] = y;
    if (y > p->limit) atomicAdd(&user->words[0], 1u);
  }
}
"""


class Detector(torch.nn.Module):
    """A 1-D convolution over the samples, pooled, then a linear layer: two
    scores per frame. Untrained: what matters here is the data path."""

    def __init__(self, channels=8, pooled=32):
        super().__init__()
        self.conv = torch.nn.Conv1d(1, channels, kernel_size=9, padding=4)
        self.pool = torch.nn.AdaptiveAvgPool1d(pooled)
        self.head = torch.nn.Linear(channels * pooled, 2)

    def forward(self, samples):
        x = samples.view(1, 1, -1)
        x = self.pool(torch.relu(self.conv(x)))
        return self.head(x.flatten(1))[0]


def config(workdir, gain):
    return {
        "backend": "cuda",
        "ring": {"slots": 64, "slot_bytes": 2 * SAMPLES},
        "ingest": {"bind": "127.0.0.1:0", "transport": "udp"},
        "output": {"enabled": True, "slots": 1024, "socket": os.path.join(workdir, "output.sock")},
        "chain": [
            {"op": "unpack", "format": "u16"},
            {"op": "kernel", "code": GAIN_KERNEL, "entry": "gain",
             "params": {"gain": gain, "offset": 0.0, "limit": 60000.0},
             "param_types": ["gain: f32", "offset: f32", "limit: f32"]},
            {"op": "stats"},
        ],
    }


def warm_up(model):
    """Runs each kernel `read` uses once, before the appliance starts."""
    with torch.inference_mode():
        x = torch.from_numpy(np.arange(SAMPLES, dtype=np.float32)).cuda()
        scores = torch.stack([model(x), model(x)]).cpu()
        torch.testing.assert_close(x, x.clone())
        torch.cuda.synchronize()
    return scores


def read(app, outputs, model, frames, gain):
    """Sends `frames`, runs the model on each output in place, checks it."""
    app.send(frames, rate=2000)
    scores = []
    with torch.inference_mode():
        for _ in frames:
            out = outputs.next(timeout=10)
            if out is None:
                raise RuntimeError(f"only {len(scores)} of {len(frames)} outputs came")
            # Each send numbers its frames on from the last: the frame's own
            # sequence says which of `frames` it is.
            sent = frames[out.frame_seq % len(frames)]
            samples = torch.from_dlpack(out)  # the ring's GPU memory
            assert samples.data_ptr() == out.data_ptr and samples.is_cuda
            scores.append(model(samples))
            expected = torch.from_numpy(sent.astype(np.float32) * gain).cuda()
            torch.cuda.current_stream().synchronize()
            if not out.valid():
                raise RuntimeError(f"output {out.sequence} was overwritten while the model ran")
            torch.testing.assert_close(samples, expected)
    return torch.stack(scores).cpu()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--frames", type=int, default=1000, help="frames to send before and after the change")
    parser.add_argument("--plots", default=None, help="write latency.png and frame.png into this directory")
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="frameloop-cuda-")
    rng = np.random.default_rng(3)
    frames = [rng.integers(0, 40000, SAMPLES, dtype=np.uint16) for _ in range(args.frames)]

    # PyTorch first: its context, the model, and one pass of every kernel
    # used below, so that none is loaded while the resident graph runs.
    model = Detector().eval().cuda()
    warm_up(model)
    with frameloop.Appliance(config(workdir, gain=1.0)) as app:
        print(app)
        outputs = app.outputs()
        before = read(app, outputs, model, frames, gain=1.0)
        print(f"{len(before)} outputs through the model, gain 1: mean scores {before.mean(0).tolist()}")

        change = app.set_params("gain", gain=2.0)
        print("changed live:", change)
        after = read(app, outputs, model, frames, gain=2.0)
        print(f"{len(after)} outputs, gain 2: mean scores {after.mean(0).tolist()}")

        latency = app.latency()
        for name in ("end_to_end", "publish_to_seen", "compute"):
            h = latency[name]
            print(f"{name:>16}: " + "  ".join(f"p{p:g} {v / 1000:.1f} µs" for p, v in h.percentiles()))
        if args.plots:
            plot(args.plots, latency, outputs, frames[-1], app)
    print("report:", app.report["latency"]["frames"])


def plot(directory, latency, outputs, frame, app):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(directory, exist_ok=True)
    fig, ax = plt.subplots(figsize=(8, 4))
    for name in ("end_to_end", "publish_to_seen", "compute"):
        dist = [(p, v) for p, v in latency[name].distribution() if p < 100]
        ax.plot([1 / (1 - p / 100) for p, _ in dist], [v / 1000 for _, v in dist], label=name)
    ax.set_xscale("log")
    ax.set_xticks([1, 10, 100, 1000], ["0%", "90%", "99%", "99.9%"])
    ax.set_ylabel("latency (µs)")
    ax.legend()
    fig.savefig(os.path.join(directory, "latency.png"), dpi=120)

    app.send([frame])
    out = outputs.next(timeout=10)
    samples = torch.from_dlpack(out).cpu().numpy()
    fig, ax = plt.subplots(figsize=(8, 3))
    ax.plot(frame[:500], lw=0.6, label="sent")
    ax.plot(samples[:500], lw=0.6, label="output (gain 2)")
    ax.legend()
    fig.savefig(os.path.join(directory, "frame.png"), dpi=120)
    print(f"plots in {directory}")


if __name__ == "__main__":
    main()
