"""The check helpers: `sender_frame` gives the payload `frameloop send`
sends, and `ReferenceChain` runs a config's chain on the CPU."""

import numpy as np
import pytest

import frameloop


def test_counter_frames_hold_the_documented_words():
    payload = frameloop.sender_frame(5, 64, stream=3, pattern="counter")
    assert len(payload) == 64
    other = frameloop.sender_frame(6, 64, stream=3, pattern="counter")
    assert payload != other, "the sequence is in the words"
    assert frameloop.sender_frame(5, 64, stream=3) == payload, "counter is the default, as for frameloop send"
    random = frameloop.sender_frame(5, 64, stream=3, pattern="random")
    assert random == frameloop.sender_frame(5, 64, stream=3, pattern="random"), "seeded by stream and sequence"
    assert random != frameloop.sender_frame(5, 64, stream=4, pattern="random")
    with pytest.raises(ValueError, match="counter"):
        frameloop.sender_frame(1, 8, pattern="ramp")


def test_the_reference_chain_runs_the_config_chain(tmp_path):
    config = tmp_path / "frameloop.toml"
    config.write_text(
        '[ring]\nslot_bytes = 4096\n'
        '[[chain]]\nop = "unpack"\nformat = "u8"\nscale = 0.5\noffset = 1.0\n'
        '[[chain]]\nop = "fir"\ntaps = [1.0, 2.0, 4.0]\n'
    )
    chain = frameloop.ReferenceChain(config)
    payload = bytes([0, 2, 4, 250, 7])
    got = np.frombuffer(chain.run(payload), dtype=np.float32)
    x = np.frombuffer(payload, dtype=np.uint8).astype(np.float64) * 0.5 + 1.0
    # A centred FIR (src/ops/cpu.rs): y[i] = x[i-1] + 2 x[i] + 4 x[i+1], zero outside
    padded = np.concatenate(([0.0], x, [0.0]))
    want = padded[:-2] + 2.0 * padded[1:-1] + 4.0 * padded[2:]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_bad_config_names_the_file_and_the_key(tmp_path):
    config = tmp_path / "bad.toml"
    config.write_text('[[chain]]\nop = "unpack"\nformat = "u7"\n')
    with pytest.raises(ValueError, match="bad.toml") as e:
        frameloop.ReferenceChain(config)
    assert "chain[0]" in str(e.value)
