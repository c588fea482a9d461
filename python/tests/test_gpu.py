"""The appliance on the CUDA backend, driven from Python (skipped without a
usable GPU and PyTorch): frames sent from Python, a user kernel given as a
string, outputs read as torch tensors in place (their data pointer is the
ring's), every output and result checked against the CPU chain.

Run on a GPU machine with the wheel installed:
    python -m pytest -q python/tests/test_gpu.py
"""

import os

# The resident graph never ends, so nothing may wait for the whole GPU. With
# CUDA's lazy module loading, PyTorch's first launch of each of its kernels
# loads the kernel's module, which waits for the context: it would wait for
# the resident graph forever. Load them all when PyTorch starts instead.
os.environ.setdefault("CUDA_MODULE_LOADING", "EAGER")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import frameloop  # noqa: E402

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for PyTorch", allow_module_level=True)

FRAME_SAMPLES = 1531  # not a multiple of the block size


@pytest.fixture(scope="module", autouse=True)
def torch_ready_before_the_appliance():
    """Starts PyTorch's CUDA and runs every kernel the checks use once,
    before any appliance starts: loading a kernel's module while the
    resident graph runs would wait for the graph (docs/python.md)."""
    a = torch.from_numpy(np.arange(FRAME_SAMPLES, dtype=np.float32)).cuda()
    torch.testing.assert_close(a, a.clone(), rtol=1e-5, atol=1e-3)
    torch.cuda.synchronize()
GAIN, OFFSET = 2.5, -3.0

GAIN_KERNEL = """#include "frameloop.cuh"
struct Gain { float gain; float offset; };
extern "C" __global__ void gain(const fl_frame* frame, const float* in, float* out, const void* params,
                                fl_user_result* user) {
  const Gain* p = FL_PARAMS(Gain, params);
  const uint32_t i = fl_thread_index();
  if (i == 0) user->words[0] = frame->in_count;
  if (i < frame->out_count) out[i] = i < frame->in_count ? in[i] * p->gain + p->offset : 0.0f;
}
"""


def cuda_config(tmp_path, name, chain):
    return {
        "backend": "cuda",
        "ring": {"slots": 64, "slot_bytes": 2 * FRAME_SAMPLES, "huge_pages": False},
        "ingest": {"bind": "127.0.0.1:0", "transport": "udp"},
        "output": {"enabled": True, "slots": 512, "socket": str(tmp_path / f"{name}.sock")},
        "chain": chain,
    }


def random_frames(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 65535, FRAME_SAMPLES, dtype=np.uint16) for _ in range(n)]


def start(config):
    try:
        return frameloop.Appliance(config)
    except frameloop.ApplianceError as e:
        if "needs a usable GPU" in str(e) and os.environ.get("FRAMELOOP_REQUIRE_GPU") != "1":
            pytest.skip(f"no usable GPU for frameloop: {e}")
        raise


def check_outputs(app, frames, expected_of, generation=None):
    """Reads one output per frame as a torch tensor in place and checks it."""
    outputs = app.outputs()
    views = [torch.from_dlpack(s) for s in outputs.slot_views()]
    results = app.results()
    app.send(frames, rate=500)
    first = None
    for k, sent in enumerate(frames):
        out = outputs.next(timeout=10)
        assert out is not None, f"output {k} never came"
        # Frames are numbered on from earlier sends: the batch's first output
        # gives its base, and every output must be the next frame.
        first = out.frame_seq if first is None else first
        assert out.frame_seq == first + k, f"output {k} is frame {out.frame_seq}, not {first + k}"
        assert out.device == "cuda"
        tensor = torch.from_dlpack(out)
        assert tensor.is_cuda and tensor.dtype == torch.float32 and tensor.numel() == len(out)
        assert tensor.data_ptr() == out.data_ptr, "the tensor is the ring's memory, not a copy"
        assert views[out.slot].data_ptr() <= out.data_ptr < views[out.slot].data_ptr() + 4 * len(views[out.slot])
        want = torch.from_numpy(expected_of(sent)).cuda()
        # Our own stream only: a device-wide synchronize would wait for the
        # resident graph, which never ends.
        torch.cuda.current_stream().synchronize()
        assert out.valid(), f"output {k} was overwritten while checked"
        torch.testing.assert_close(tensor, want, rtol=1e-5, atol=1e-3)
        record = results.next(timeout=10)
        assert record.frame_seq == out.frame_seq
        assert record.output_len == FRAME_SAMPLES and record.gpu_clock
        if generation is not None:
            assert record.param_generation == generation
        yield out, record
    assert outputs.lost == 0


def test_the_cuda_backend_from_python_matches_the_cpu_chain(tmp_path):
    chain = [{"op": "unpack", "format": "u16", "scale": 0.01}, {"op": "fir", "taps": [0.25, 0.5, 0.25]},
             {"op": "stats"}, {"op": "threshold", "level": 300.0}]
    config = cuda_config(tmp_path, "builtin", chain)
    reference = frameloop.ReferenceChain(config)
    frames = random_frames(200, 5)
    with start(config) as app:
        assert app.backend == "cuda"

        def expected(frame):
            return np.frombuffer(reference.run(frame.tobytes()), dtype=np.float32).copy()

        for out, record in check_outputs(app, frames, expected):
            want = expected(frames[record.frame_seq])
            assert record.stats.detect_count == int(np.count_nonzero(want > 300.0))
            assert abs(record.stats.sum - float(want.sum(dtype=np.float64))) <= 1e-3 * max(1.0, abs(float(want.sum())))
    assert app.report["latency"]["frames"]["processed"] == len(frames)


def test_a_user_kernel_given_as_a_string_runs_and_its_params_change_live(tmp_path):
    chain = [{"op": "unpack", "format": "u16"},
             {"op": "kernel", "code": GAIN_KERNEL, "entry": "gain", "params": {"gain": GAIN, "offset": OFFSET},
              "param_types": ["gain: f32", "offset: f32"]}]
    with start(cuda_config(tmp_path, "kernel", chain)) as app:
        frames = random_frames(100, 9)
        for _, record in check_outputs(app, frames, lambda f: f.astype(np.float32) * GAIN + OFFSET, generation=0):
            assert record.user[0] == FRAME_SAMPLES
        assert app.set_params("gain", gain=-1.0, offset=7.0)["generation"] == 1
        more = random_frames(100, 10)
        for _ in check_outputs(app, more, lambda f: f.astype(np.float32) * -1.0 + 7.0, generation=1):
            pass
        latency = app.latency()
        assert latency["compute"].count == 200


def test_two_cuda_appliances_on_one_gpu_are_refused_with_a_message(tmp_path):
    chain = [{"op": "unpack", "format": "u16"}, {"op": "stats"}]
    with start(cuda_config(tmp_path, "first", chain)):
        with pytest.raises(frameloop.ApplianceError, match=r"GPU 0 already runs the resident loop"):
            frameloop.Appliance(cuda_config(tmp_path, "second", chain))
