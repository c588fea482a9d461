"""Type stubs of the frameloop module (python/src): start, feed, tune,
watch and stop a frameloop appliance in this process, or attach to one
running elsewhere; read its output ring in place (frames export as DLPack
tensors); check outputs against the CPU chain."""

import os
import pathlib
from typing import Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

Config = Union[Mapping[str, Any], str, os.PathLike, None]
Payload = Any  # a NumPy array (its bytes, in its dtype), bytes, bytearray or memoryview

__version__: str

class AttachError(ConnectionError):
    """Attaching to the appliance's output socket failed or was refused."""

class FrameOverwritten(RuntimeError):
    """The appliance reused the frame's ring slot."""

class ConfigError(ValueError):
    """A config with problems, every one named by its key."""
    problems: List[Tuple[str, str]]
    """(key, message) of every problem."""
    keys: List[str]

class CompileError(ConfigError):
    """A user kernel NVRTC refused."""
    lines: List[Tuple[str, str, int, str]]
    """(key, file, line, message) of every compiler error; `file` is the
    source path, or "code:ENTRY" for a kernel given as code."""
    line: Optional[int]
    """The first error's line."""

class ApplianceError(RuntimeError):
    """The appliance could not start or run; the message says what to change."""

class ReloadRefused(RuntimeError):
    """A reload changed nothing."""
    reasons: List[str]

class Stats:
    sum: float
    min: float
    max: float
    mean: float
    detect_count: int
    first_detect_index: int

class Frame:
    sequence: int
    result_seq: int
    ring_seq: int
    frame_seq: int
    stream_id: int
    sender_ts_ns: int
    first_rx_ns: int
    last_rx_ns: int
    published_ns: int
    detect_ns: int
    done_ns: int
    gpu_clock: bool
    result_flags: int
    skipped_before: int
    stats: Stats
    user: List[int]
    device: str
    data_ptr: int
    slot: int
    param_generation: int
    def __len__(self) -> int: ...
    def valid(self) -> bool: ...
    def copy(self) -> "Frame": ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __dlpack__(
        self,
        stream: Optional[int] = None,
        *,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...

class Consumer:
    lost: int
    read: int
    head: int
    slots: int
    capacity: int
    device: str
    appliance_gone: bool
    socket_path: pathlib.Path
    def __init__(
        self, socket_path: Union[str, os.PathLike], spin_us: Optional[float] = 20.0
    ) -> None: ...
    def next(self, timeout: Optional[float] = None) -> Optional[Frame]: ...
    def slot_views(self) -> List["Slot"]: ...
    def __iter__(self) -> Iterator[Frame]: ...
    def __next__(self) -> Frame: ...

class Slot:
    """One ring slot's samples in place, exported once per slot."""
    index: int
    data_ptr: int
    def __len__(self) -> int: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def __dlpack__(
        self,
        stream: Optional[int] = None,
        *,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...

class ReferenceChain:
    """The [[chain]] of a frameloop config, run on the CPU."""
    def __init__(self, config: Config, max_frame_bytes: Optional[int] = None) -> None: ...
    def run(self, payload: bytes) -> bytes:
        """The chain's final samples for one payload, little-endian float32 bytes."""

def sender_frame(seq: int, frame_bytes: int, stream: int = 0, pattern: str = "counter") -> bytes:
    """The payload `frameloop send --pattern PATTERN` sends as frame `seq` of `stream`."""

class ResultRecord:
    """One processed frame's result record (`Appliance.results()`)."""
    result_seq: int
    ring_seq: int
    frame_seq: int
    stream_id: int
    slot_flags: int
    sender_ts_ns: int
    first_rx_ns: int
    last_rx_ns: int
    published_ns: int
    detect_ns: int
    done_ns: int
    stats: Stats
    output_len: int
    result_flags: int
    gpu_clock: bool
    skipped_before: int
    user: List[int]
    param_generation: int

class Results:
    """The iterator `Appliance.results()` returns; ends once the appliance
    stopped and every record was taken."""
    def next(self, timeout: Optional[float] = None) -> Optional[ResultRecord]: ...
    def __iter__(self) -> Iterator[ResultRecord]: ...
    def __next__(self) -> ResultRecord: ...

class Histogram:
    """One latency segment's HDR histogram (values in nanoseconds)."""
    segment: str
    count: int
    min: int
    max: int
    mean: float
    stdev: float
    def __len__(self) -> int: ...
    def percentile(self, p: float) -> int:
        """The value (ns) at percentile `p` (0 to 100)."""
    def percentiles(self, ps: Optional[Sequence[float]] = None) -> List[Tuple[float, int]]: ...
    def distribution(self, ticks_per_half: int = 5) -> List[Tuple[float, int]]:
        """(percentile, value_ns) steps, for a latency-by-percentile plot."""
    def buckets(self) -> List[Tuple[int, int]]:
        """(value_ns, count) of every recorded bucket, ascending."""
    def merge(self, other: "Histogram") -> "Histogram": ...
    def __add__(self, other: "Histogram") -> "Histogram": ...
    def encode(self) -> str:
        """The compressed V2 encoding, base64 (HdrHistogram's interval-log form)."""
    @staticmethod
    def decode(text: str, segment: str = "decoded") -> "Histogram": ...

class Appliance:
    """A frameloop appliance running in this process (see docs/python.md)."""
    running: bool
    address: Tuple[str, int]
    port: int
    backend: str
    config: Dict[str, Any]
    param_generation: int
    report: Optional[Dict[str, Any]]
    results_dropped: int
    def __init__(
        self,
        config: Config = None,
        *,
        backend: Optional[str] = None,
        gpu: int = 0,
        base_dir: Optional[Union[str, os.PathLike]] = None,
        record: Optional[Union[str, os.PathLike]] = None,
        results_buffer: int = 65536,
    ) -> None: ...
    def __enter__(self) -> "Appliance": ...
    def __exit__(self, *exc: Any) -> bool: ...
    def stop(self) -> Dict[str, Any]:
        """Stops and returns the report `frameloop run --json` prints."""
    def wait(self, timeout: Optional[float] = None) -> Optional[str]: ...
    def send(
        self,
        frames: Optional[Iterable[Payload]] = None,
        *,
        stream: int = 0,
        rate: Optional[float] = None,
        count: Optional[int] = None,
        duration: Optional[float] = None,
        frame_bytes: Optional[int] = None,
        packet_bytes: int = 8972,
        pattern: str = "counter",
        pacing: str = "spin",
        streams: int = 1,
    ) -> Dict[str, Any]: ...
    def outputs(self, spin_us: Optional[float] = 20.0) -> Consumer: ...
    def results(self) -> Results: ...
    def metrics(self) -> Dict[str, Any]: ...
    def latency(self) -> Dict[str, Histogram]: ...
    def reload(self, config: Config) -> Dict[str, Any]: ...
    def set_params(self, op: Union[int, str], **values: Any) -> Dict[str, Any]: ...

class Sender:
    """The sensor emulator (`frameloop send`)."""
    def __init__(
        self,
        to: Union[Appliance, str],
        *,
        rate: float = 1000.0,
        frame_bytes: int = 65536,
        packet_bytes: int = 8972,
        count: Optional[int] = None,
        duration: Optional[float] = None,
        streams: int = 1,
        pattern: str = "counter",
        pacing: str = "spin",
    ) -> None: ...
    def run(self) -> Dict[str, Any]: ...
    def payload(self, seq: int, stream: int = 0) -> bytes: ...

def replay(
    path: Union[str, os.PathLike],
    to: Optional[Union[Appliance, str]] = None,
    *,
    speed: float = 1.0,
    max_rate: bool = False,
    ports: Sequence[int] = (),
    streams: Sequence[int] = (),
    config: Config = None,
    max_gap_ms: int = 1000,
) -> Dict[str, Any]:
    """Replays a pcap/pcapng capture to `to`, or in-process through `config`'s chain."""
