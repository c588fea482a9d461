//! The `#[repr(C)]` layout of the frame ring and the result ring, shared with
//! the CUDA side through `handlers/ring.cuh` (a test compares the two).
//!
//! One allocation holds a [`RingHeader`] followed, at [`SLOTS_OFFSET`], by
//! `slot_count` slots of `slot_stride` bytes. Each slot starts with a
//! [`SlotHeader`]; its payload follows at [`SLOT_PAYLOAD_OFFSET`].
//! Sequence numbers are ring sequences: 1 for the first published slot, 0
//! meaning "none"; ring sequence `s` lives in slot `(s - 1) % slot_count`.

use std::sync::atomic::AtomicU64;

/// Magic value in [`RingHeader::magic`] ("FRNG" little-endian).
pub const RING_MAGIC: u32 = u32::from_le_bytes(*b"FRNG");
/// Layout version; bump on any change and mirror it in `handlers/ring.cuh`.
pub const RING_LAYOUT_VERSION: u32 = 1;
/// Byte offset of slot 0 from the start of the ring allocation.
pub const SLOTS_OFFSET: usize = 256;
/// Byte offset of the payload inside a slot.
pub const SLOT_PAYLOAD_OFFSET: usize = 128;
/// Slots are padded to a multiple of this, so every payload is 128-byte aligned.
pub const SLOT_ALIGN: usize = 256;

/// Slot flag: every packet of the frame arrived.
pub const SLOT_COMPLETE: u32 = 1 << 0;
/// Slot flag: packets were missing when the frame was published; missing bytes are zero.
pub const SLOT_INCOMPLETE: u32 = 1 << 1;
/// Slot flag: the frame was published because it went stale (timed out).
pub const SLOT_TIMED_OUT: u32 = 1 << 2;

/// Overrun policy code stored in [`RingHeader::policy`]: process every frame.
pub const POLICY_EVERY: u32 = 0;
/// Overrun policy code: skip to the newest published frame.
pub const POLICY_LATEST: u32 = 1;

/// Header of the frame ring. Each control word owns a 64-byte line so the
/// writer and the consumer never share a cache line.
///
/// Invariants: `claimed_seq >= consumed_seq`, `head_seq >= claimed_seq`
/// (claimed may equal head), and the writer writes slot of sequence `s` only
/// when `s - slot_count <= consumed_seq || s - slot_count < claimed_seq`.
#[repr(C, align(64))]
pub struct RingHeader {
    pub magic: u32,
    pub version: u32,
    pub slot_count: u32,
    pub slot_stride: u32,
    pub payload_capacity: u32,
    pub policy: u32,
    pub slots_offset: u32,
    pub _reserved0: [u32; 9],
    /// Ring sequence of the newest published slot (writer: release store).
    pub head_seq: AtomicU64,
    pub _pad1: [u64; 7],
    /// Ring sequence the consumer is reading now (consumer: store before reading).
    pub claimed_seq: AtomicU64,
    pub _pad2: [u64; 7],
    /// Ring sequence the consumer has finished (consumer: release store).
    pub consumed_seq: AtomicU64,
    pub _pad3: [u64; 7],
}

/// Header at the start of each slot, written before the head sequence is published.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SlotHeader {
    /// Ring sequence this slot holds.
    pub ring_seq: u64,
    /// Sensor frame sequence from the wire.
    pub frame_seq: u64,
    pub stream_id: u32,
    /// `SLOT_*` flags.
    pub flags: u32,
    /// Valid payload bytes.
    pub payload_len: u32,
    pub packets_expected: u32,
    pub packets_received: u32,
    pub _reserved0: u32,
    /// Sender's timestamp from the wire (ns, CLOCK_REALTIME of the sender).
    pub sender_ts_ns: u64,
    /// First packet received (ns, CLOCK_REALTIME; kernel timestamp where available).
    pub first_rx_ns: u64,
    /// Last packet received.
    pub last_rx_ns: u64,
    /// Published to the ring.
    pub published_ns: u64,
    /// How much of the payload is final while the frame is still arriving:
    /// [`received_mark`]`(ring_seq, bytes)`, the UDP reassembler's one-word
    /// progress report (release store). `bytes` is the length of the
    /// received prefix: it never passes a missing packet and never exceeds
    /// the frame, and those bytes do not change until the slot is reused.
    /// The tag (low 32 bits of the ring sequence) tells this frame's mark
    /// from the one a slot's previous frame left. Receivers that do not
    /// report progress leave it 0.
    pub received_mark: u64,
    pub _reserved1: [u64; 6],
}

/// The [`SlotHeader::received_mark`] word for ring sequence `seq` with a
/// received prefix of `bytes`: the sequence's low 32 bits, then `bytes`.
pub const fn received_mark(seq: u64, bytes: u32) -> u64 {
    ((seq as u32 as u64) << 32) | bytes as u64
}

/// The received prefix a [`SlotHeader::received_mark`] word reports for
/// ring sequence `seq`, or `None` when the word belongs to another frame.
pub const fn received_prefix(mark: u64, seq: u64) -> Option<u32> {
    if (mark >> 32) as u32 == seq as u32 { Some(mark as u32) } else { None }
}

/// Header of the result ring (written by the consumer, read by the host result thread).
#[repr(C, align(64))]
pub struct ResultRingHeader {
    pub magic: u32,
    /// Record slots (`result_slots` of the capacity the reader was promised).
    pub capacity: u32,
    pub _reserved0: [u32; 14],
    /// Sequence of the newest result written (release store).
    pub head_seq: AtomicU64,
    pub _pad1: [u64; 7],
}

/// Magic of [`ResultRingHeader`] ("FRRS").
pub const RESULT_MAGIC: u32 = u32::from_le_bytes(*b"FRRS");

/// One processed frame: the timestamps carried from the slot, the consumer's
/// own timestamps and the values of the reduction operators.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ResultRecord {
    /// Result sequence (1-based, contiguous).
    pub result_seq: u64,
    /// Ring sequence of the frame this result is for.
    pub ring_seq: u64,
    pub frame_seq: u64,
    pub stream_id: u32,
    pub slot_flags: u32,
    pub sender_ts_ns: u64,
    pub first_rx_ns: u64,
    pub last_rx_ns: u64,
    pub published_ns: u64,
    /// Consumer noticed the frame (host clock, or GPU clock for the CUDA backend).
    pub detect_ns: u64,
    /// Consumer finished the chain (same clock as `detect_ns`).
    pub done_ns: u64,
    pub sum: f32,
    pub min: f32,
    pub max: f32,
    pub mean: f32,
    /// Samples above the threshold.
    pub detect_count: u32,
    /// Index of the first sample above the threshold, or -1.
    pub first_detect_index: i32,
    /// Number of samples at the end of the chain.
    pub output_len: u32,
    /// Result flags (`RESULT_*`).
    pub result_flags: u32,
    /// Frames the consumer skipped before this one (policy `latest`).
    pub skipped_before: u64,
    /// The frame's user result words (`fl_user_result` in
    /// `kernels/frameloop.cuh`): what the chain's user kernels wrote, zero
    /// for a chain without any and on the host backend.
    pub user: [u32; USER_RESULT_WORDS],
    /// The operator parameter set the frame ran with: 0 for the config the
    /// appliance started with, one more for each reload applied since
    /// (always 0 on the CUDA backend, which applies changes on restart).
    pub param_generation: u32,
    /// Non-zero when a user kernel (or, on the host backend, a user stage)
    /// asked for an actuation for this frame (`fl_request_actuation`):
    /// what `[[actuate]]` outputs with `when = "flag"` send on.
    pub actuate_request: u32,
}

/// Words of a frame's user result ([`ResultRecord::user`], `FL_USER_RESULT_WORDS`).
pub const USER_RESULT_WORDS: usize = 12;

/// Result flag: the chain has a stats operator and `sum/min/max/mean` are valid.
pub const RESULT_HAS_STATS: u32 = 1 << 0;
/// Result flag: the chain has a threshold operator and the detect fields are valid.
pub const RESULT_HAS_DETECT: u32 = 1 << 1;
/// Result flag: timestamps `detect_ns`/`done_ns` are GPU `%globaltimer` values.
pub const RESULT_GPU_CLOCK: u32 = 1 << 2;

/// Byte offset of result record 0 from the start of the result ring.
pub const RESULTS_OFFSET: usize = 128;

/// Device-resident description of the frame being processed in this
/// iteration of the GPU loop. The data-ready handler fills it when it claims a
/// slot; every GPU operator kernel receives a pointer to it, because a graph
/// captured once cannot take the slot address as a fixed argument.
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FrameDesc {
    /// Device address of the claimed slot's payload.
    pub payload_dptr: u64,
    /// Device address of the claimed slot's [`SlotHeader`].
    pub slot_dptr: u64,
    /// Ring sequence claimed.
    pub ring_seq: u64,
    /// Valid payload bytes (copied from the slot header, clamped to capacity).
    pub payload_len: u32,
    /// Samples produced by the unpack operator (written by its kernel).
    pub n_samples: u32,
    /// `%globaltimer` when the handler claimed the slot.
    pub detect_ns: u64,
    /// Published frames skipped to reach this one (policy `latest`).
    pub skipped: u64,
    /// Device address of the parameter bank the frame runs with
    /// (`gpu::param_banks`), 0 when the loop has no banks.
    pub params_dptr: u64,
    /// The parameter generation of that bank.
    pub param_generation: u32,
    pub _reserved: u32,
}

/// Device-resident reduction values of one frame, written by the stats and
/// threshold kernels and copied into the [`ResultRecord`] by the end marker.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ChainResult {
    pub sum: f32,
    pub min: f32,
    pub max: f32,
    pub mean: f32,
    pub detect_count: u32,
    pub first_detect_index: i32,
    pub _reserved: [u32; 2],
}

/// Bytes between slots for a given payload capacity, or `None` if it overflows.
pub fn slot_stride(payload_capacity: usize) -> Option<usize> {
    let unpadded = SLOT_PAYLOAD_OFFSET.checked_add(payload_capacity)?;
    unpadded.div_ceil(SLOT_ALIGN).checked_mul(SLOT_ALIGN)
}

/// Total bytes of a frame ring allocation, or `None` if the size overflows.
pub fn ring_bytes(slot_count: usize, payload_capacity: usize) -> Option<usize> {
    slot_count.checked_mul(slot_stride(payload_capacity)?)?.checked_add(SLOTS_OFFSET)
}

/// Record slots of a result ring that lets its reader fall `capacity`
/// results behind: one more than `capacity`, because the slot the producer
/// is rewriting is never read (see `result_ring.rs`). `None` on overflow.
pub fn result_slots(capacity: usize) -> Option<usize> {
    capacity.checked_add(1)
}

/// Total bytes of a result ring allocation for `capacity` results, or
/// `None` if the size overflows.
pub fn result_ring_bytes(capacity: usize) -> Option<usize> {
    result_slots(capacity)?.checked_mul(std::mem::size_of::<ResultRecord>())?.checked_add(RESULTS_OFFSET)
}

const _: () = {
    assert!(std::mem::size_of::<RingHeader>() == 256);
    assert!(std::mem::size_of::<RingHeader>() <= SLOTS_OFFSET);
    assert!(std::mem::size_of::<SlotHeader>() == SLOT_PAYLOAD_OFFSET);
    assert!(std::mem::size_of::<ResultRingHeader>() == RESULTS_OFFSET);
    assert!(std::mem::size_of::<ResultRecord>() == 192);
    assert!(std::mem::size_of::<FrameDesc>() == 64);
    assert!(std::mem::size_of::<ChainResult>() == 32);
};

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::offset_of;

    #[test]
    fn offsets_are_the_documented_ones() {
        assert_eq!(offset_of!(RingHeader, head_seq), 64);
        assert_eq!(offset_of!(RingHeader, claimed_seq), 128);
        assert_eq!(offset_of!(RingHeader, consumed_seq), 192);
        assert_eq!(offset_of!(SlotHeader, payload_len), 24);
        assert_eq!(offset_of!(SlotHeader, published_ns), 64);
        assert_eq!(offset_of!(ResultRingHeader, head_seq), 64);
        assert_eq!(offset_of!(ResultRecord, detect_ns), 64);
        assert_eq!(offset_of!(ResultRecord, sum), 80);
        assert_eq!(offset_of!(ResultRecord, user), 120);
        assert_eq!(offset_of!(ResultRecord, param_generation), 168);
        assert_eq!(slot_stride(1), Some(256));
        assert_eq!(slot_stride(128), Some(256));
        assert_eq!(slot_stride(129), Some(512));
    }

    #[test]
    fn sizes_from_configs_overflow_to_none_not_a_panic() {
        assert_eq!(ring_bytes(4, 64), Some(SLOTS_OFFSET + 4 * 256));
        assert_eq!(ring_bytes(usize::MAX / 256 + 1, 64), None, "slots x stride overflows");
        assert_eq!(ring_bytes(2, usize::MAX - 100), None, "payload + slot header overflows");
        assert_eq!(ring_bytes(2, usize::MAX - SLOT_PAYLOAD_OFFSET - 10), None, "stride rounding overflows");
        assert_eq!(result_ring_bytes(3), Some(RESULTS_OFFSET + 4 * 192));
        assert_eq!(result_ring_bytes(usize::MAX), None);
        assert_eq!(result_ring_bytes(usize::MAX / 192), None);
    }
}
