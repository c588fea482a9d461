"""The test ring writer (python/ring-writer): serves a host-memory output
ring and publishes known outputs on command, as the appliance would."""

import os
import pathlib
import subprocess
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_WRITER = HERE.parent / "target" / "release" / "frameloop-ring-writer"


def expected_samples(seq, capacity):
    """What the ring writer publishes as output `seq` (see its main.rs)."""
    import numpy as np

    n = max(capacity - seq % 4, 1)
    return (seq * 1000 + np.arange(n)).astype(np.float32)


class RingWriter:
    def __init__(self, socket, slots, capacity):
        exe = os.environ.get("FRAMELOOP_RING_WRITER", str(DEFAULT_WRITER))
        if not os.path.exists(exe):
            pytest.fail(f"no ring writer at {exe}; build it with "
                        "cargo build --release --manifest-path python/Cargo.toml -p frameloop-ring-writer "
                        "or set FRAMELOOP_RING_WRITER")
        self.socket = str(socket)
        self.slots = slots
        self.capacity = capacity
        self.proc = subprocess.Popen(
            [exe, self.socket, str(slots), str(capacity)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )
        line = self.proc.stdout.readline()
        assert line.startswith("serving "), f"ring writer said {line!r}"

    def command(self, line):
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        assert answer, f"ring writer gave no answer to {line!r} (exit {self.proc.poll()})"
        return answer

    def publish(self, n):
        """Publishes `n` outputs; returns the head sequence."""
        return int(self.command(f"publish {n}").split()[1])

    def consumers(self):
        """(attached consumers, last_read_seq of the first)."""
        words = self.command("consumers").split()
        return int(words[1]), int(words[3])

    def wait_consumers(self, count, limit=5.0):
        deadline = time.monotonic() + limit
        while self.consumers()[0] != count:
            assert time.monotonic() < deadline, f"never {count} consumers attached"
            time.sleep(0.01)

    def quit(self):
        if self.proc.poll() is None:
            self.proc.stdin.write("quit\n")
            self.proc.stdin.flush()
            self.proc.wait(timeout=10)

    def close(self):
        try:
            self.quit()
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def ring(tmp_path):
    writer = RingWriter(tmp_path / "output.sock", slots=4, capacity=64)
    yield writer
    writer.close()
