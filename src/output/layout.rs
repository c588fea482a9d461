//! The `#[repr(C)]` layout of the output ring, shared with consumers in other
//! processes and with the CUDA side through `kernels/output_ring.cuh`.
//!
//! Two regions. The *control block* is shared host memory (a memfd both
//! sides map): a [`ControlHeader`] with the geometry and the head sequence,
//! at [`SLOT_SEQS_OFFSET`] one sequence word per slot, and at
//! `consumers_offset` one [`ConsumerWord`] per attachable consumer, and at
//! `heads_offset` one [`SLOT_HEAD_BYTES`] slot head per slot: the
//! [`ResultRecord`] and user-result words of the output in that slot, so a
//! consumer reads them from host memory whatever the data region is. The
//! *data region* (a memfd on the host backend, device memory on the CUDA
//! backend) holds `slot_count` slots of `slot_stride` bytes, each a
//! copy of the same slot head at 0 (record, then the user-result words at
//! [`SLOT_USER_OFFSET`], for readers on the GPU that only hold the device
//! address) and the chain's final samples (contiguous little-endian `f32`) at
//! [`SLOT_SAMPLES_OFFSET`].
//!
//! Output sequences are 1-based and contiguous; sequence `s` lives in slot
//! `(s - 1) % slot_count`. A slot's sequence word is [`writing_word`]`(s)`
//! (odd) while sequence `s` is being written and [`written_word`]`(s)`
//! (even) once it is whole; 0 means the slot was never written.

use crate::ring::ResultRecord;
use std::sync::atomic::AtomicU64;

/// Magic value in [`ControlHeader::magic`] ("FOUT" little-endian).
pub const OUTPUT_MAGIC: u32 = u32::from_le_bytes(*b"FOUT");
/// Layout version; bump on any change here or in the handshake, and mirror it
/// in `kernels/output_ring.cuh`. A consumer of another version is refused.
pub const OUTPUT_LAYOUT_VERSION: u32 = 2;

/// Byte offset of the slot sequence words in the control block.
pub const SLOT_SEQS_OFFSET: usize = 128;
/// Consumers that can attach at once (one [`ConsumerWord`] each).
pub const MAX_CONSUMERS: usize = 16;

/// Byte offset of the user-result words inside a slot.
pub const SLOT_USER_OFFSET: usize = 192;
/// 32-bit words of the user-result area (48 bytes).
pub const USER_RESULT_WORDS: usize = 12;
/// Bytes of one slot head (record and user-result words, padded) in the
/// control block's head table, and of the head at the start of a data slot.
pub const SLOT_HEAD_BYTES: usize = 256;
/// Byte offset of the samples inside a slot.
pub const SLOT_SAMPLES_OFFSET: usize = 256;
/// Slots are padded to a multiple of this, so every sample array is 256-byte aligned.
pub const OUTPUT_SLOT_ALIGN: usize = 256;

/// Where the data region lives ([`ControlHeader::memory_kind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum MemoryKind {
    /// Shared host memory: the consumer maps the data memfd it receives.
    HostMemfd = 1,
    /// CUDA device memory: the consumer opens a CUDA IPC memory handle.
    CudaDevice = 2,
}

impl MemoryKind {
    /// The kind of a [`ControlHeader::memory_kind`] code, `None` if unknown.
    pub fn from_code(code: u32) -> Option<Self> {
        match code {
            1 => Some(MemoryKind::HostMemfd),
            2 => Some(MemoryKind::CudaDevice),
            _ => None,
        }
    }

    /// Short name for logs and the `consume` command.
    pub fn name(self) -> &'static str {
        match self {
            MemoryKind::HostMemfd => "host memfd",
            MemoryKind::CudaDevice => "cuda device",
        }
    }
}

/// Header of the control block. The head sequence owns its own cache line.
#[repr(C, align(64))]
pub struct ControlHeader {
    pub magic: u32,
    pub version: u32,
    pub slot_count: u32,
    /// Bytes between two slots of the data region.
    pub slot_stride: u32,
    /// `f32` samples a slot holds.
    pub sample_capacity: u32,
    /// A [`MemoryKind`] code.
    pub memory_kind: u32,
    /// CUDA device ordinal of the data region, -1 for host memory.
    pub device_ordinal: i32,
    /// Byte offset of consumer word 0 in the control block.
    pub consumers_offset: u32,
    /// Bytes of the data region.
    pub data_bytes: u64,
    /// Byte offset of the slot-head table in the control block.
    pub heads_offset: u32,
    pub _reserved0: u32,
    pub _reserved1: [u64; 2],
    /// Output sequence of the newest whole slot (writer: release store).
    pub head_seq: AtomicU64,
    pub _pad1: [u64; 7],
}

/// One attachable consumer's line of the control block.
#[repr(C, align(64))]
pub struct ConsumerWord {
    /// Non-zero while a consumer is attached under this index (server only).
    pub attached: AtomicU64,
    /// The newest output sequence the consumer has finished with (consumer:
    /// relaxed store). The appliance only reads it, to report lag.
    pub last_read_seq: AtomicU64,
    pub _pad: [u64; 6],
}

/// One slot head: what the control block's head table holds per slot and a
/// data slot starts with.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SlotHead {
    pub record: ResultRecord,
    pub user: [u32; USER_RESULT_WORDS],
    pub _pad: [u32; 4],
}

/// The slot sequence word while sequence `seq` is being written (odd).
pub const fn writing_word(seq: u64) -> u64 {
    (seq << 1) | 1
}

/// The slot sequence word once sequence `seq` is whole (even, non-zero).
pub const fn written_word(seq: u64) -> u64 {
    seq << 1
}

/// The geometry of an output ring: what the hello carries and both sides check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputGeometry {
    /// Slots in the ring.
    pub slot_count: usize,
    /// Bytes between two slots of the data region.
    pub slot_stride: usize,
    /// `f32` samples a slot holds.
    pub sample_capacity: usize,
}

impl OutputGeometry {
    /// The geometry for `slot_count` slots of `sample_capacity` samples, or
    /// `None` when a size overflows or either count is zero or past `u32`.
    pub fn new(slot_count: usize, sample_capacity: usize) -> Option<Self> {
        if slot_count == 0 || slot_count > u32::MAX as usize || sample_capacity == 0 {
            return None;
        }
        let unpadded = sample_capacity.checked_mul(4)?.checked_add(SLOT_SAMPLES_OFFSET)?;
        let slot_stride = unpadded.div_ceil(OUTPUT_SLOT_ALIGN).checked_mul(OUTPUT_SLOT_ALIGN)?;
        if slot_stride > u32::MAX as usize {
            return None;
        }
        let geometry = Self { slot_count, slot_stride, sample_capacity };
        geometry.data_bytes()?;
        geometry.control_bytes()?;
        Some(geometry)
    }

    /// Bytes of the data region, `None` on overflow.
    pub fn data_bytes(&self) -> Option<usize> {
        self.slot_count.checked_mul(self.slot_stride)
    }

    /// Byte offset of consumer word 0 in the control block, `None` on overflow.
    pub fn consumers_offset(&self) -> Option<usize> {
        let seqs = self.slot_count.checked_mul(8)?;
        SLOT_SEQS_OFFSET.checked_add(seqs)?.checked_next_multiple_of(64)
    }

    /// Byte offset of the slot-head table in the control block (after the
    /// consumer words, [`SLOT_HEAD_BYTES`]-aligned), `None` on overflow.
    pub fn heads_offset(&self) -> Option<usize> {
        self.consumers_offset()?
            .checked_add(MAX_CONSUMERS * std::mem::size_of::<ConsumerWord>())?
            .checked_next_multiple_of(SLOT_HEAD_BYTES)
    }

    /// Bytes of the control block, `None` on overflow.
    pub fn control_bytes(&self) -> Option<usize> {
        self.heads_offset()?.checked_add(self.slot_count.checked_mul(SLOT_HEAD_BYTES)?)
    }

    /// Byte offset of the slot of output sequence `seq` (>= 1) in the data region.
    pub fn slot_offset(&self, seq: u64) -> usize {
        debug_assert!(seq > 0);
        // Below `slot_count * slot_stride`, which `new` checked fits.
        ((seq - 1) % self.slot_count as u64) as usize * self.slot_stride
    }

    /// Index of the slot of output sequence `seq` (>= 1).
    pub fn slot_index(&self, seq: u64) -> usize {
        debug_assert!(seq > 0);
        ((seq - 1) % self.slot_count as u64) as usize
    }
}

const _: () = {
    assert!(std::mem::size_of::<ControlHeader>() == SLOT_SEQS_OFFSET);
    assert!(std::mem::size_of::<ConsumerWord>() == 64);
    assert!(std::mem::size_of::<ResultRecord>() == SLOT_USER_OFFSET);
    assert!(SLOT_USER_OFFSET + USER_RESULT_WORDS * 4 <= SLOT_HEAD_BYTES);
    assert!(SLOT_HEAD_BYTES <= SLOT_SAMPLES_OFFSET);
    assert!(std::mem::size_of::<SlotHead>() == SLOT_HEAD_BYTES);
    assert!(std::mem::offset_of!(SlotHead, user) == SLOT_USER_OFFSET);
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn offsets_are_the_documented_ones() {
        assert_eq!(offset_of!(ControlHeader, sample_capacity), 16);
        assert_eq!(offset_of!(ControlHeader, consumers_offset), 28);
        assert_eq!(offset_of!(ControlHeader, data_bytes), 32);
        assert_eq!(offset_of!(ControlHeader, heads_offset), 40);
        assert_eq!(offset_of!(ControlHeader, head_seq), 64);
        assert_eq!(offset_of!(ConsumerWord, last_read_seq), 8);
        let g = OutputGeometry::new(8, 1).unwrap();
        assert_eq!((g.slot_stride, g.data_bytes(), g.consumers_offset()), (512, Some(4096), Some(192)));
        assert_eq!(g.heads_offset(), Some(1280), "192 + 16 * 64, rounded up to 256");
        assert_eq!(g.control_bytes(), Some(1280 + 8 * 256));
        assert_eq!(OutputGeometry::new(3, 64).unwrap().slot_stride, 512, "256 + 256 bytes of samples");
        assert_eq!(OutputGeometry::new(3, 65).unwrap().slot_stride, 768);
        assert_eq!(OutputGeometry::new(3, 65).unwrap().consumers_offset(), Some(192));
        assert_eq!(g.slot_offset(1), 0);
        assert_eq!(g.slot_offset(9), 0);
        assert_eq!(g.slot_offset(10), 512);
    }

    #[test]
    fn sequence_words_are_odd_while_writing_and_even_after() {
        assert_eq!(writing_word(3) & 1, 1);
        assert_eq!(written_word(3) & 1, 0);
        assert_ne!(written_word(1), 0, "0 is reserved for a slot never written");
        assert_ne!(writing_word(3), written_word(3));
    }

    #[test]
    fn geometry_from_configs_overflows_to_none_not_a_panic() {
        assert_eq!(OutputGeometry::new(0, 64), None);
        assert_eq!(OutputGeometry::new(8, 0), None);
        assert_eq!(OutputGeometry::new(8, usize::MAX / 2), None);
        assert_eq!(OutputGeometry::new(8, (u32::MAX / 4) as usize), None, "stride past u32");
        assert_eq!(OutputGeometry::new(usize::MAX / 512, 64), None);
        assert_eq!(MemoryKind::from_code(2), Some(MemoryKind::CudaDevice));
        assert_eq!(MemoryKind::from_code(0), None);
    }
}
