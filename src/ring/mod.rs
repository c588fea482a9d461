//! Frame ring and result ring: fixed slots shared between ingest, the
//! consumer (CPU or GPU) and the result thread, synchronised by sequences.

pub mod frame_ring;
pub mod layout;
pub mod memory;
pub mod pages;
pub mod prefetch;
pub(crate) mod reader_wake;
pub mod result_ring;

pub use frame_ring::{
    ClaimedSlot, FrameRing, OverrunPolicy, RingError, RingFull, RingReader, RingSequences, RingWriter,
};
pub use layout::{ResultRecord, SlotHeader};
pub use memory::{CopyError, DeviceCopies, HostMemory, RingMemory};
pub use pages::RingPages;
pub use result_ring::{ResultReader, ResultRing, ResultWriter};
