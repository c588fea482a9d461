"""Type stubs of the frameloop module (python/src): read a frameloop
appliance's output ring in place; frames export as DLPack tensors."""

import os
import pathlib
from typing import Any, Iterator, List, Optional, Tuple, Union

__version__: str

class AttachError(ConnectionError):
    """Attaching to the appliance's output socket failed or was refused."""

class FrameOverwritten(RuntimeError):
    """The appliance reused the frame's ring slot."""

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
    def __init__(
        self, config_path: Union[str, os.PathLike], max_frame_bytes: Optional[int] = None
    ) -> None: ...
    def run(self, payload: bytes) -> bytes:
        """The chain's final samples for one payload, little-endian float32 bytes."""

def sender_frame(seq: int, frame_bytes: int, stream: int = 0, pattern: str = "counter") -> bytes:
    """The payload `frameloop send --pattern PATTERN` sends as frame `seq` of `stream`."""
