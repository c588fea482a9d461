"""frameloop.Appliance on the host backend: start and stop, config
problems, frames sent from Python checked against the CPU chain, a live
parameter change, Ctrl-C, two appliances in one process, latency
histograms, and a capture replayed into an appliance."""

import os
import signal
import threading
import time

import numpy as np
import pytest

import frameloop

FRAME_SAMPLES = 1000  # not a multiple of any block size
TAPS_BEFORE = [0.25, 0.5, 0.25]
TAPS_AFTER = [-1.0, 3.0, -1.0]


def host_config(tmp_path, name="out", taps=TAPS_BEFORE, output_slots=256):
    """A host-backend config on a free loopback port with outputs enabled."""
    return {
        "backend": "host",
        "ring": {"slots": 64, "slot_bytes": 4096, "huge_pages": False},
        "ingest": {"bind": "127.0.0.1:0"},
        "output": {"enabled": True, "slots": output_slots, "socket": str(tmp_path / f"{name}.sock")},
        "service": {"shutdown_timeout_ms": 3000},
        "chain": [
            {"op": "unpack", "format": "u16", "scale": 0.5},
            {"op": "fir", "taps": taps},
            {"op": "stats"},
            {"op": "threshold", "level": 1000.0},
        ],
    }


def random_frames(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 4096, FRAME_SAMPLES, dtype=np.uint16) for _ in range(n)]


def expected(chain, frame):
    return np.frombuffer(chain.run(frame.tobytes()), dtype=np.float32)


def test_with_block_starts_and_stops_and_reports(tmp_path):
    started = time.monotonic()
    with frameloop.Appliance(host_config(tmp_path)) as app:
        assert app.running
        assert app.backend == "host"
        assert app.port > 0 and app.address[0] == "127.0.0.1"
        assert app.config["ring"]["slots"] == 64
        app.send(random_frames(3, 1))
        results = app.results()
        got = [results.next(timeout=5) for _ in range(3)]
        assert [r.frame_seq for r in got] == [0, 1, 2]
    assert not app.running
    report = app.report
    assert report is not None and report is app.stop(), "stopping again returns the same report"
    assert report["backend"]["name"] == "host"
    assert report["latency"]["frames"]["processed"] == 3
    assert "hung" not in report, report.get("hung")
    assert time.monotonic() - started < 10
    with pytest.raises(frameloop.ApplianceError, match="stopped"):
        app.metrics()


def test_a_dict_with_three_mistakes_names_all_three_keys_in_one_exception(tmp_path):
    config = host_config(tmp_path)
    config["ring"]["slotz"] = 8  # unknown key
    config["loop"] = {"poll_budget_us": -5}  # out of range
    config["chain"][1]["taps"] = [1.0, 2.0]  # an even number of taps
    with pytest.raises(frameloop.ConfigError) as raised:
        frameloop.Appliance(config)
    keys = raised.value.keys
    assert "ring.slotz" in keys
    assert "loop.poll_budget_us" in keys
    assert any(k.startswith("chain") for k in keys), keys
    assert len(keys) == 3, raised.value.problems
    text = str(raised.value)
    assert "3 problem(s)" in text and "ring.slotz" in text and "poll_budget_us" in text
    assert isinstance(raised.value, ValueError)


def test_values_python_has_and_toml_has_not_are_named(tmp_path):
    config = host_config(tmp_path)
    config["ring"]["slots"] = object()
    config["ingest"]["bind"] = None  # None: the key's default
    with pytest.raises(frameloop.ConfigError) as raised:
        frameloop.Appliance(config)
    assert raised.value.keys == ["ring.slots"], raised.value.problems


def test_frames_sent_from_python_arrive_and_every_output_equals_the_cpu_chain(tmp_path):
    config = host_config(tmp_path)
    frames = random_frames(120, 7)
    reference = frameloop.ReferenceChain(config)
    with frameloop.Appliance(config) as app:
        outputs = app.outputs()
        results = app.results()
        sent = app.send(frames, rate=500)
        assert sent["frames"] == len(frames)
        seen = []
        for i, frame in enumerate(frames):
            out = outputs.next(timeout=5)
            assert out is not None, f"output {i} never came"
            samples = np.from_dlpack(out)
            want = expected(reference, frame)
            assert out.frame_seq == i
            assert len(out) == len(want) == FRAME_SAMPLES
            np.testing.assert_array_equal(samples, want)
            assert out.valid()
            record = results.next(timeout=5)
            assert record.frame_seq == i and record.output_len == FRAME_SAMPLES
            assert record.stats.detect_count == int(np.count_nonzero(want > 1000.0))
            seen.append(i)
        assert outputs.lost == 0
    assert seen == list(range(len(frames)))
    assert app.report["ingest"]["frames_complete"] == len(frames)


def test_a_live_parameter_change_shows_from_one_frame_on_and_loses_none(tmp_path):
    config = host_config(tmp_path)
    before = frameloop.ReferenceChain(config)
    after = frameloop.ReferenceChain(host_config(tmp_path, taps=TAPS_AFTER))
    frames = random_frames(200, 11)
    with frameloop.Appliance(config) as app:
        outputs = app.outputs()
        sending = threading.Thread(target=app.send, args=(frames,), kwargs={"rate": 500})
        sending.start()
        got = []
        changed = None
        while len(got) < len(frames):
            out = outputs.next(timeout=5)
            assert out is not None, f"only {len(got)} outputs came"
            got.append((out.frame_seq, out.param_generation, np.from_dlpack(out).copy(), out.valid()))
            if changed is None and len(got) == 60:
                changed = app.set_params("fir", taps=TAPS_AFTER)
        sending.join()
        assert outputs.lost == 0
        assert app.param_generation == 1
    assert changed == {"outcome": "applied_params", "generation": 1}
    assert [g[0] for g in got] == list(range(len(frames))), "every frame, in order"
    generations = [g[1] for g in got]
    first_new = generations.index(1)
    assert 60 <= first_new < len(frames), "the change came while frames streamed"
    assert generations == [0] * first_new + [1] * (len(frames) - first_new), "from one frame on"
    for (seq, generation, samples, valid), frame in zip(got, frames):
        assert valid
        chain = after if generation else before
        np.testing.assert_array_equal(samples, expected(chain, frame), err_msg=f"frame {seq}")


def test_set_params_and_reload_refuse_what_they_cannot_apply(tmp_path):
    config = host_config(tmp_path)
    with frameloop.Appliance(config) as app:
        with pytest.raises(frameloop.ConfigError) as bad:
            app.set_params("threshold", level=float("nan"))
        assert any("chain" in k for k in bad.value.keys)
        with pytest.raises(ValueError, match="no operator"):
            app.set_params("median", width=3)
        restart = dict(config, ring=dict(config["ring"], slots=32))
        with pytest.raises(frameloop.ReloadRefused) as refused:
            app.reload(restart)
        assert any("ring.slots" in r for r in refused.value.reasons)
        assert app.config["ring"]["slots"] == 64, "nothing changed"
        assert app.reload(config)["outcome"] == "unchanged"
        assert app.set_params(3, level=5.0)["outcome"] == "applied_params"
        assert app.config["chain"][3]["level"] == 5.0


def test_ctrl_c_while_iterating_outputs_stops_the_appliance_promptly(tmp_path):
    app = frameloop.Appliance(host_config(tmp_path))
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    started = time.monotonic()
    seen = 0
    with pytest.raises(KeyboardInterrupt):
        for _ in app.outputs():
            seen += 1
    took = time.monotonic() - started
    timer.join()
    assert took < 5.0, f"the interrupt took {took:.1f} s"
    assert not app.running
    assert app.report is not None and "hung" not in app.report
    assert seen == 0


def test_two_appliances_on_two_ports_in_one_process_and_a_clear_error_on_the_same_port(tmp_path):
    with frameloop.Appliance(host_config(tmp_path, "a")) as a, frameloop.Appliance(host_config(tmp_path, "b")) as b:
        assert a.port != b.port
        a.send(random_frames(5, 1))
        b.send(random_frames(9, 2))
        ra, rb = a.results(), b.results()
        assert len([ra.next(timeout=5) for _ in range(5)]) == 5
        assert len([rb.next(timeout=5) for _ in range(9)]) == 9
        assert ra.next(timeout=0.2) is None and rb.next(timeout=0.2) is None, "each got only its own"
        same = host_config(tmp_path, "c")
        same["ingest"]["bind"] = f"127.0.0.1:{a.port}"
        with pytest.raises(frameloop.ApplianceError, match="ingest.bind"):
            frameloop.Appliance(same)
        same_socket = host_config(tmp_path, "a")
        with pytest.raises(frameloop.ApplianceError, match="output.socket"):
            frameloop.Appliance(same_socket)
    assert a.report["latency"]["frames"]["processed"] == 5
    assert b.report["latency"]["frames"]["processed"] == 9


def test_metrics_and_latency_histograms(tmp_path):
    with frameloop.Appliance(host_config(tmp_path)) as app:
        app.send(random_frames(50, 3), rate=1000)
        results = app.results()
        for _ in range(50):
            assert results.next(timeout=5) is not None
        metrics = app.metrics()
        latency = app.latency()
    assert metrics["frames"]["processed"] == 50
    assert metrics["backend"] == "host"
    compute = latency["compute"]
    assert compute.count == 50 and compute.segment == "compute"
    assert 0 < compute.percentile(50) <= compute.percentile(99) <= compute.max
    assert sum(c for _, c in compute.buckets()) == 50
    dist = compute.distribution()
    assert dist[0][0] == 0.0 and dist[-1][0] == 100.0
    assert [v for _, v in dist] == sorted(v for _, v in dist)
    both = compute.merge(latency["end_to_end"])
    assert both.count == 100
    again = frameloop.Histogram.decode(compute.encode())
    assert again.count == 50 and again.percentile(99.9) == compute.percentile(99.9)


def test_the_sender_and_a_capture_replayed_into_an_appliance(tmp_path):
    capture = tmp_path / "frames.pcapng"
    config = host_config(tmp_path, "rec")
    with frameloop.Appliance(config, record=str(capture)) as recorder:
        stats = frameloop.Sender(recorder, rate=500, frame_bytes=2000, count=20, pacing="sleep").run()
        assert stats["frames"] == 20
        results = recorder.results()
        assert len([results.next(timeout=5) for _ in range(20)]) == 20
    assert recorder.report["recording"]["datagrams"] >= 20
    with frameloop.Appliance(host_config(tmp_path, "play")) as player:
        summary = frameloop.replay(str(capture), player, max_rate=True)
        assert summary["datagrams"] >= 20 and summary["ended_early"] is None
        results = player.results()
        assert [results.next(timeout=5).frame_seq for _ in range(20)] == list(range(20))
    offline = frameloop.replay(str(capture), config=host_config(tmp_path, "x"))
    assert offline["frames"] == 20


GAIN_KERNEL = """#include "frameloop.cuh"
struct Gain { float gain; float offset; };
extern "C" __global__ void gain(const fl_frame* frame, const float* in, float* out, const void* params,
                                fl_user_result* user) {
  const Gain* p = FL_PARAMS(Gain, params);
  const uint32_t i = fl_thread_index();
  if (i < frame->out_count) out[i] = i < frame->in_count ? in[i] * p->gain + p->offset : 0.0f;
}
"""


def kernel_config(tmp_path, code):
    config = host_config(tmp_path, "kernel")
    config["backend"] = "cuda"
    config["chain"] = [
        {"op": "unpack", "format": "u16"},
        {"op": "kernel", "code": code, "entry": "gain", "params": {"gain": 2.0, "offset": -1.0},
         "param_types": ["gain: f32", "offset: f32"]},
    ]
    return config


def nvrtc_missing(error):
    if "NVRTC (libnvrtc.so.13) cannot be loaded" not in str(error):
        return False
    if os.environ.get("FRAMELOOP_REQUIRE_NVRTC") == "1":
        pytest.fail(f"NVRTC is required (FRAMELOOP_REQUIRE_NVRTC=1) but {error}")
    return True


def test_a_user_kernel_given_as_a_string_is_compiled_and_its_errors_carry_the_line(tmp_path):
    broken = GAIN_KERNEL.replace("in[i] * p->gain", "in[i] * p->gainz")
    with pytest.raises(frameloop.CompileError) as raised:
        frameloop.Appliance(kernel_config(tmp_path, broken))
    if nvrtc_missing(raised.value):
        pytest.skip("NVRTC is not installed (source scripts/env.sh after scripts/setup.sh)")
    assert raised.value.keys == ["chain[1].code"], raised.value.problems
    assert raised.value.line == 7, raised.value.lines
    key, file, line, message = raised.value.lines[0]
    assert (key, file, line) == ("chain[1].code", "code:gain", 7) and "gainz" in message
    assert isinstance(raised.value, frameloop.ConfigError)
    wrong_entry = kernel_config(tmp_path, GAIN_KERNEL)
    wrong_entry["chain"][1]["entry"] = "gane"
    with pytest.raises(frameloop.CompileError) as raised:
        frameloop.Appliance(wrong_entry)
    assert raised.value.keys == ["chain[1].entry"] and "gain" in str(raised.value)


def test_a_user_kernel_that_compiles_gets_past_the_check_to_the_gpu(tmp_path):
    try:
        app = frameloop.Appliance(kernel_config(tmp_path, GAIN_KERNEL))
    except frameloop.CompileError as e:
        if nvrtc_missing(e):
            pytest.skip("NVRTC is not installed")
        raise
    except frameloop.ApplianceError as e:
        assert "GPU" in str(e) or "backend cuda" in str(e), e  # no GPU on this machine
        return
    app.stop()  # a GPU machine: it ran
