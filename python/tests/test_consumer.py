"""The frameloop module against a served host-memory output ring: frames
carry the published record, their samples export through DLPack in place
(no copy), a reader that falls behind counts what it lost, and a frame
whose slot is reused says so."""

import ctypes
import gc
import time

import numpy as np
import pytest

import frameloop
from conftest import expected_samples


def check_frame(frame, seq, capacity):
    assert frame.sequence == seq
    assert (frame.result_seq, frame.ring_seq, frame.frame_seq) == (seq, seq + 100, seq + 200)
    assert frame.stream_id == 7
    assert frame.sender_ts_ns == seq * 1000
    assert abs(time.time_ns() - frame.published_ns) < 60e9, "published_ns is CLOCK_REALTIME"
    assert frame.done_ns == frame.published_ns and not frame.gpu_clock
    assert frame.user == [seq * 100 + k for k in range(12)]
    expected = expected_samples(seq, capacity)
    assert len(frame) == len(expected)
    stats = frame.stats
    assert (stats.min, stats.max, stats.detect_count) == (expected[0], expected[-1], seq)
    assert stats.sum == pytest.approx(float(expected.sum()), rel=1e-6)
    assert stats.first_detect_index == -1
    return expected


def test_frames_carry_the_record_and_export_their_samples_in_place(ring):
    consumer = frameloop.Consumer(ring.socket)
    assert (consumer.device, consumer.slots, consumer.capacity) == ("cpu", 4, 64)
    assert ring.publish(3) == 3
    for seq in (1, 2, 3):
        frame = consumer.next(timeout=5)
        expected = check_frame(frame, seq, 64)
        assert frame.device == "cpu" and frame.__dlpack_device__() == (1, 0)
        samples = np.from_dlpack(frame)
        assert samples.dtype == np.float32 and samples.shape == expected.shape
        np.testing.assert_array_equal(samples, expected)
        # No copy: the array is the ring slot's memory, 256-byte aligned.
        assert samples.ctypes.data == frame.data_ptr
        assert frame.data_ptr % 256 == 0
        assert np.shares_memory(samples, np.from_dlpack(frame))
        assert not samples.flags.writeable, "the ring is the appliance's: exported read-only"
        assert frame.valid()
    assert consumer.next(timeout=0.05) is None
    with pytest.raises(ValueError, match="timeout"):
        consumer.next(timeout=-1)
    assert (consumer.read, consumer.lost, consumer.head) == (3, 0, 3)
    assert ring.consumers() == (1, 3), "the appliance sees what was read"


def test_a_frame_reads_the_slot_until_it_is_reused_and_then_says_so(ring):
    consumer = frameloop.Consumer(ring.socket)
    ring.publish(1)
    frame = consumer.next(timeout=5)
    samples = np.from_dlpack(frame)
    kept = frame.copy()
    assert kept.valid() and kept.sequence == 1 and kept.user == frame.user
    assert kept.data_ptr != frame.data_ptr
    # Four outputs later the appliance writes output 5 into slot 1.
    ring.publish(4)
    assert not frame.valid()
    np.testing.assert_array_equal(samples[: len(expected_samples(5, 64))], expected_samples(5, 64))
    with pytest.raises(frameloop.FrameOverwritten, match="output 1 was overwritten"):
        np.from_dlpack(frame)
    with pytest.raises(frameloop.FrameOverwritten):
        frame.copy()
    # The copy is the output as it was.
    assert kept.valid()
    np.testing.assert_array_equal(np.from_dlpack(kept), expected_samples(1, 64))
    assert np.from_dlpack(kept).flags.writeable
    assert not np.shares_memory(np.from_dlpack(kept, copy=True), np.from_dlpack(kept))


def test_a_reader_that_falls_behind_counts_the_outputs_it_lost(ring):
    consumer = frameloop.Consumer(ring.socket)
    assert ring.publish(10) == 10
    # Only the newest `slots` outputs are still in the ring.
    got = [consumer.next(timeout=5) for _ in range(4)]
    assert [f.sequence for f in got] == [7, 8, 9, 10]
    assert consumer.lost == 6
    for f in got:
        np.testing.assert_array_equal(np.from_dlpack(f), expected_samples(f.sequence, 64))
    assert ring.publish(9) == 19
    frame = consumer.next(timeout=5)
    assert frame.sequence == 16
    assert (consumer.read, consumer.lost) == (5, 6 + 5)
    assert consumer.read + consumer.lost == 16, "read + lost is every output since the attach"


def test_an_exported_tensor_keeps_the_ring_mapped_after_frame_and_consumer_go(ring):
    consumer = frameloop.Consumer(ring.socket)
    ring.publish(2)
    consumer.next(timeout=5)
    frame = consumer.next(timeout=5)
    samples = np.from_dlpack(frame)
    del frame, consumer
    gc.collect()
    np.testing.assert_array_equal(samples, expected_samples(2, 64))
    assert ring.consumers()[0] == 1, "the tensor still holds the consumer"
    del samples
    gc.collect()
    ring.wait_consumers(0)


def test_both_capsule_kinds_follow_the_dlpack_names(ring):
    consumer = frameloop.Consumer(ring.socket)
    ring.publish(1)
    frame = consumer.next(timeout=5)
    is_valid = ctypes.pythonapi.PyCapsule_IsValid
    is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
    legacy = frame.__dlpack__()
    versioned = frame.__dlpack__(max_version=(1, 0))
    assert is_valid(legacy, b"dltensor") and is_valid(versioned, b"dltensor_versioned")
    del legacy, versioned  # unused capsules free their tensors

    class LegacyOnly:
        """A producer of DLPack 0.x: numpy falls back to the "dltensor" capsule."""

        def __dlpack__(self, stream=None):
            return frame.__dlpack__(stream=stream)

        def __dlpack_device__(self):
            return frame.__dlpack_device__()

    samples = np.from_dlpack(LegacyOnly())
    assert samples.ctypes.data == frame.data_ptr
    np.testing.assert_array_equal(samples, expected_samples(1, 64))
    with pytest.raises(BufferError, match="DLPack device"):
        frame.__dlpack__(dl_device=(2, 0))
    copied = np.from_dlpack(frame, copy=True)
    assert not np.shares_memory(copied, np.from_dlpack(frame))
    np.testing.assert_array_equal(copied, expected_samples(1, 64))


def test_iteration_ends_when_the_appliance_stops(ring):
    consumer = frameloop.Consumer(ring.socket)
    ring.publish(3)
    ring.quit()
    assert [f.sequence for f in consumer] == [1, 2, 3]
    assert consumer.appliance_gone
    assert consumer.next(timeout=None) is None


def test_attaching_to_no_appliance_names_the_socket_setting(tmp_path):
    with pytest.raises(frameloop.AttachError, match="output.socket"):
        frameloop.Consumer(tmp_path / "none.sock")


def test_slot_views_are_exported_once_and_serve_every_output_of_their_slot(ring):
    consumer = frameloop.Consumer(ring.socket, spin_us=None)
    views = consumer.slot_views()
    assert [v.index for v in views] == [0, 1, 2, 3] and all(len(v) == 64 for v in views)
    arrays = [np.from_dlpack(v) for v in views]     # one export per slot, up front
    assert all(not a.flags.writeable for a in arrays)
    ring.publish(6)                                  # outputs 5 and 6 reuse slots 0 and 1
    for seq in range(1, 7):
        frame = consumer.next(timeout=5)
        if seq <= 2:
            # overwritten before we got to them: never handed out
            assert frame.sequence >= 3
        seq = frame.sequence
        assert frame.slot == (seq - 1) % 4
        in_place = arrays[frame.slot][: len(frame)]
        assert in_place.ctypes.data == frame.data_ptr == views[frame.slot].data_ptr
        np.testing.assert_array_equal(in_place, expected_samples(seq, 64))
        assert frame.valid()
        if seq == 6:
            break
    assert consumer.lost == 2
    with pytest.raises(BufferError, match="in place"):
        views[0].__dlpack__(copy=True)
