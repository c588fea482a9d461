//! The ring as a remote writer sees it, as pure functions: the descriptor
//! the appliance sends after a connection is established, remote addresses
//! of slots and control words, the encoding of what the sensor writes (slot
//! header, head-sequence trailer) and the credit rule that keeps the sensor
//! off slots the consumer may still read.
//!
//! Byte order on the wire is little-endian throughout; every frameloop host
//! and every CUDA GPU is little-endian, so the words the NIC places are the
//! native `u64`s the ring protocol reads.

use crate::ring::layout::{
    RING_LAYOUT_VERSION, RingHeader, SLOT_ALIGN, SLOT_COMPLETE, SLOT_PAYLOAD_OFFSET, SLOTS_OFFSET, SlotHeader,
};
use std::mem::{offset_of, size_of};
use thiserror::Error;

/// Magic of an encoded [`RingDescriptor`] ("FLRD" little-endian).
pub const DESCRIPTOR_MAGIC: u32 = u32::from_le_bytes(*b"FLRD");
/// Version of the descriptor encoding and of the write protocol it implies.
pub const PROTOCOL_VERSION: u32 = 1;
/// Bytes of an encoded descriptor (it travels in one RDMA SEND).
pub const DESCRIPTOR_BYTES: usize = 64;

/// Offset of `head_seq` in the ring (the trailer's target).
pub const HEAD_SEQ_OFFSET: usize = offset_of!(RingHeader, head_seq);
/// Offset of `claimed_seq`, the first byte of the consumer-state read.
pub const CLAIMED_SEQ_OFFSET: usize = offset_of!(RingHeader, claimed_seq);
/// Offset of `consumed_seq`.
pub const CONSUMED_SEQ_OFFSET: usize = offset_of!(RingHeader, consumed_seq);
/// Bytes of one RDMA READ that fetches both consumer words.
pub const CONSUMER_READ_BYTES: usize = CONSUMED_SEQ_OFFSET + 8 - CLAIMED_SEQ_OFFSET;

/// Where the ring is and how it is cut, as the sensor needs it to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingDescriptor {
    /// Remote address (the MR's iova) of ring byte 0.
    pub ring_addr: u64,
    /// Registered bytes from `ring_addr`.
    pub ring_len: u64,
    /// Remote key of the ring's memory region.
    pub rkey: u32,
    pub slot_count: u32,
    pub slot_stride: u32,
    pub payload_capacity: u32,
    /// Overrun policy code of the ring (`POLICY_*`).
    pub policy: u32,
}

/// A descriptor that cannot be used; the sensor refuses the connection.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum DescriptorError {
    /// A descriptor of the wrong length; the peer is not a frameloop appliance.
    #[error(
        "ring descriptor is {0} bytes, expected {DESCRIPTOR_BYTES}: the peer is not a frameloop appliance"
    )]
    Length(usize),
    /// A descriptor of the wrong magic; the peer is not a frameloop appliance.
    #[error("ring descriptor has magic {0:#010x}: the peer is not a frameloop appliance")]
    Magic(u32),
    /// Another protocol or ring layout version; run the same frameloop version on both sides.
    #[error(
        "the appliance speaks RDMA protocol {found} and ring layout {layout}, this sender {PROTOCOL_VERSION} and {RING_LAYOUT_VERSION}; run the same frameloop version on both"
    )]
    Version { found: u32, layout: u32 },
    /// A descriptor whose numbers do not fit together; run the same frameloop version on both
    /// sides.
    #[error("ring descriptor is inconsistent: {0}; run the same frameloop version on both sides")]
    Geometry(&'static str),
}

impl RingDescriptor {
    /// Encodes the descriptor into its 64-byte wire form.
    pub fn encode(&self) -> [u8; DESCRIPTOR_BYTES] {
        let mut out = [0u8; DESCRIPTOR_BYTES];
        let words32 = [
            DESCRIPTOR_MAGIC,
            PROTOCOL_VERSION,
            RING_LAYOUT_VERSION,
            SLOTS_OFFSET as u32,
            self.rkey,
            self.slot_count,
            self.slot_stride,
            self.payload_capacity,
            self.policy,
        ];
        for (i, w) in words32.iter().enumerate() {
            out[i * 4..i * 4 + 4].copy_from_slice(&w.to_le_bytes());
        }
        out[40..48].copy_from_slice(&self.ring_addr.to_le_bytes());
        out[48..56].copy_from_slice(&self.ring_len.to_le_bytes());
        out
    }

    /// Decodes and checks a descriptor: versions, and a geometry under
    /// which every slot lies inside the registered length.
    pub fn decode(bytes: &[u8]) -> Result<Self, DescriptorError> {
        if bytes.len() != DESCRIPTOR_BYTES {
            return Err(DescriptorError::Length(bytes.len()));
        }
        let u32_at = |i: usize| u32::from_le_bytes(bytes[i * 4..i * 4 + 4].try_into().expect("4 bytes"));
        let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        if u32_at(0) != DESCRIPTOR_MAGIC {
            return Err(DescriptorError::Magic(u32_at(0)));
        }
        if u32_at(1) != PROTOCOL_VERSION || u32_at(2) != RING_LAYOUT_VERSION {
            return Err(DescriptorError::Version { found: u32_at(1), layout: u32_at(2) });
        }
        if u32_at(3) as usize != SLOTS_OFFSET {
            return Err(DescriptorError::Geometry("slots do not start where this layout puts them"));
        }
        let d = RingDescriptor {
            rkey: u32_at(4),
            slot_count: u32_at(5),
            slot_stride: u32_at(6),
            payload_capacity: u32_at(7),
            policy: u32_at(8),
            ring_addr: u64_at(40),
            ring_len: u64_at(48),
        };
        if d.slot_count < 2 {
            return Err(DescriptorError::Geometry("fewer than two slots"));
        }
        if d.payload_capacity == 0 {
            return Err(DescriptorError::Geometry("slots have no payload capacity"));
        }
        let stride = d.slot_stride as u64;
        if !stride.is_multiple_of(SLOT_ALIGN as u64)
            || stride < SLOT_PAYLOAD_OFFSET as u64 + d.payload_capacity as u64
        {
            return Err(DescriptorError::Geometry("slot stride does not hold a slot header and its payload"));
        }
        let needed =
            (d.slot_count as u64).checked_mul(stride).and_then(|b| b.checked_add(SLOTS_OFFSET as u64));
        if needed.is_none_or(|n| n > d.ring_len) {
            return Err(DescriptorError::Geometry("slots extend past the registered ring"));
        }
        if d.ring_addr.checked_add(d.ring_len).is_none() {
            return Err(DescriptorError::Geometry("ring address range overflows"));
        }
        Ok(d)
    }

    /// Slot index of ring sequence `seq` (1-based sequences, as the ring).
    pub fn slot_index(&self, seq: u64) -> u32 {
        debug_assert!(seq > 0, "ring sequences start at 1");
        ((seq.max(1) - 1) % self.slot_count as u64) as u32
    }

    /// Remote address of the slot (its [`SlotHeader`]) for ring sequence `seq`.
    pub fn slot_addr(&self, seq: u64) -> u64 {
        self.ring_addr + SLOTS_OFFSET as u64 + self.slot_index(seq) as u64 * self.slot_stride as u64
    }

    /// Remote address of the ring's `head_seq` word (the trailer's target).
    pub fn head_addr(&self) -> u64 {
        self.ring_addr + HEAD_SEQ_OFFSET as u64
    }

    /// Remote address of the consumer-state read ([`CONSUMER_READ_BYTES`] from `claimed_seq`).
    pub fn consumer_addr(&self) -> u64 {
        self.ring_addr + CLAIMED_SEQ_OFFSET as u64
    }

    /// Bytes one slot write covers for a payload of `payload_len` bytes:
    /// the slot header and the payload, contiguous. `None` when the payload
    /// does not fit a slot.
    pub fn slot_write_len(&self, payload_len: usize) -> Option<usize> {
        (payload_len <= self.payload_capacity as usize).then_some(SLOT_PAYLOAD_OFFSET + payload_len)
    }
}

/// The consumer's progress, read from the ring with one RDMA READ.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConsumerState {
    pub claimed: u64,
    pub consumed: u64,
}

impl ConsumerState {
    /// Decodes the [`CONSUMER_READ_BYTES`] read from [`RingDescriptor::consumer_addr`].
    pub fn decode(bytes: &[u8; CONSUMER_READ_BYTES]) -> Self {
        let at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().expect("8 bytes"));
        ConsumerState { claimed: at(0), consumed: at(CONSUMED_SEQ_OFFSET - CLAIMED_SEQ_OFFSET) }
    }
}

/// The ring's reuse rule for a remote writer: the slot of sequence `seq`
/// may be written when it was never used or when its previous occupant
/// (`seq - slot_count`) is consumed, or the consumer claimed something newer
/// (policy `latest` skipped it). The same rule as the local ring writer.
pub fn slot_writable(seq: u64, slot_count: u64, state: ConsumerState) -> bool {
    if seq <= slot_count {
        return true;
    }
    let occupant = seq - slot_count;
    occupant <= state.consumed || occupant < state.claimed
}

/// What the sensor does next with a frame for a ring sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Credit {
    /// The slot is free: write it.
    Write,
    /// The cached consumer state does not free the slot: read it again.
    Refresh,
}

/// The sensor's cached view of the consumer: it reads the ring's consumer
/// words only when the cache no longer proves the next slot free, so a
/// consumer that keeps up costs one RDMA READ per `slot_count` frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditWindow {
    slot_count: u64,
    /// Invariant: never newer than the ring's real consumer words.
    cached: ConsumerState,
}

impl CreditWindow {
    pub fn new(slot_count: u32) -> Self {
        debug_assert!(slot_count >= 2);
        Self { slot_count: slot_count as u64, cached: ConsumerState::default() }
    }

    /// Whether the slot for `seq` is known free.
    pub fn check(&self, seq: u64) -> Credit {
        if slot_writable(seq, self.slot_count, self.cached) { Credit::Write } else { Credit::Refresh }
    }

    /// Takes a fresh read of the consumer words (sequences never go back,
    /// so an older read never replaces a newer one).
    pub fn update(&mut self, fresh: ConsumerState) {
        self.cached.claimed = self.cached.claimed.max(fresh.claimed);
        self.cached.consumed = self.cached.consumed.max(fresh.consumed);
    }

    pub fn cached(&self) -> ConsumerState {
        self.cached
    }
}

/// What a frame written by RDMA carries in its slot header. There is no
/// receiving CPU, so the receive and publish times are the sender's clock at
/// the moment it posted the writes (`posted_ns`, CLOCK_REALTIME).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoteFrame {
    pub ring_seq: u64,
    pub frame_seq: u64,
    pub stream_id: u32,
    pub payload_len: u32,
    pub sender_ts_ns: u64,
    pub posted_ns: u64,
}

impl RemoteFrame {
    /// The slot header the sensor writes in front of the payload.
    pub fn slot_header(&self) -> SlotHeader {
        SlotHeader {
            ring_seq: self.ring_seq,
            frame_seq: self.frame_seq,
            stream_id: self.stream_id,
            flags: SLOT_COMPLETE,
            payload_len: self.payload_len,
            packets_expected: 1,
            packets_received: 1,
            sender_ts_ns: self.sender_ts_ns,
            first_rx_ns: self.posted_ns,
            last_rx_ns: self.posted_ns,
            published_ns: self.posted_ns,
            ..SlotHeader::default()
        }
    }

    /// Writes the slot header's bytes into the first
    /// [`SLOT_PAYLOAD_OFFSET`] bytes of `out` (the local staging buffer).
    pub fn encode_header(&self, out: &mut [u8]) {
        let h = self.slot_header();
        let mut put = |offset: usize, bytes: &[u8]| out[offset..offset + bytes.len()].copy_from_slice(bytes);
        put(0, &[0u8; SLOT_PAYLOAD_OFFSET]);
        put(offset_of!(SlotHeader, ring_seq), &h.ring_seq.to_le_bytes());
        put(offset_of!(SlotHeader, frame_seq), &h.frame_seq.to_le_bytes());
        put(offset_of!(SlotHeader, stream_id), &h.stream_id.to_le_bytes());
        put(offset_of!(SlotHeader, flags), &h.flags.to_le_bytes());
        put(offset_of!(SlotHeader, payload_len), &h.payload_len.to_le_bytes());
        put(offset_of!(SlotHeader, packets_expected), &h.packets_expected.to_le_bytes());
        put(offset_of!(SlotHeader, packets_received), &h.packets_received.to_le_bytes());
        put(offset_of!(SlotHeader, sender_ts_ns), &h.sender_ts_ns.to_le_bytes());
        put(offset_of!(SlotHeader, first_rx_ns), &h.first_rx_ns.to_le_bytes());
        put(offset_of!(SlotHeader, last_rx_ns), &h.last_rx_ns.to_le_bytes());
        put(offset_of!(SlotHeader, published_ns), &h.published_ns.to_le_bytes());
    }
}

/// The trailer: the 8 bytes written to `head_seq` after the slot, which
/// publish ring sequence `seq` exactly as a local writer's release store.
pub fn trailer(seq: u64) -> [u8; 8] {
    seq.to_le_bytes()
}

const _: () = assert!(size_of::<SlotHeader>() == SLOT_PAYLOAD_OFFSET);
const _: () = assert!(CONSUMER_READ_BYTES == 72);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::layout::{POLICY_LATEST, ring_bytes, slot_stride};
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy};
    use proptest::prelude::*;

    fn descriptor(slots: u32, capacity: u32) -> RingDescriptor {
        RingDescriptor {
            ring_addr: 0x7f00_0000_0000,
            ring_len: ring_bytes(slots as usize, capacity as usize).unwrap() as u64,
            rkey: 0x1234,
            slot_count: slots,
            slot_stride: slot_stride(capacity as usize).unwrap() as u32,
            payload_capacity: capacity,
            policy: POLICY_LATEST,
        }
    }

    fn host_ring(slots: usize, cap: usize) -> std::sync::Arc<FrameRing> {
        let mem = HostMemory::new(ring_bytes(slots, cap).unwrap()).unwrap();
        FrameRing::new(Box::new(mem), slots, cap, OverrunPolicy::Every).unwrap()
    }

    #[test]
    fn descriptor_round_trips() {
        let d = descriptor(8, 8192);
        assert_eq!(RingDescriptor::decode(&d.encode()), Ok(d));
    }

    #[test]
    fn descriptor_rejects_foreign_and_inconsistent_bytes() {
        let good = descriptor(4, 1000).encode();
        assert_eq!(RingDescriptor::decode(&good[..63]), Err(DescriptorError::Length(63)));
        let mut b = good;
        b[0] ^= 1;
        assert!(matches!(RingDescriptor::decode(&b), Err(DescriptorError::Magic(_))));
        let mut b = good;
        b[4] = 9;
        assert!(matches!(RingDescriptor::decode(&b), Err(DescriptorError::Version { found: 9, .. })));
        for (field, value) in [(5usize, 1u32), (6, 128), (6, 300), (7, 0)] {
            let mut b = good;
            b[field * 4..field * 4 + 4].copy_from_slice(&value.to_le_bytes());
            assert!(
                matches!(RingDescriptor::decode(&b), Err(DescriptorError::Geometry(_))),
                "{field}={value}"
            );
        }
        let mut d = descriptor(4, 1000);
        d.ring_len -= 1;
        assert!(matches!(RingDescriptor::decode(&d.encode()), Err(DescriptorError::Geometry(_))));
        d.ring_len += 1;
        d.ring_addr = u64::MAX - 10;
        assert!(matches!(RingDescriptor::decode(&d.encode()), Err(DescriptorError::Geometry(_))));
    }

    #[test]
    fn addresses_match_the_local_ring() {
        // A real ring in host memory: the remote address arithmetic on its
        // base must land on the bytes the local writer and reader use.
        let (slots, cap) = (3usize, 300usize);
        let ring = host_ring(slots, cap);
        let base = ring.memory().as_ptr() as u64;
        let mut d = descriptor(slots as u32, cap as u32);
        d.ring_addr = base;
        let h = ring.header();
        assert_eq!(d.head_addr(), &h.head_seq as *const _ as u64);
        assert_eq!(d.consumer_addr(), &h.claimed_seq as *const _ as u64);
        assert_eq!(d.consumer_addr() + 64, &h.consumed_seq as *const _ as u64);
        let mut writer = ring.writer().unwrap();
        for seq in 1..=slots as u64 {
            assert_eq!(writer.reserve().unwrap(), seq);
            let payload = writer.payload_mut(seq).as_ptr() as u64;
            assert_eq!(d.slot_addr(seq) + SLOT_PAYLOAD_OFFSET as u64, payload);
            assert_eq!(d.slot_addr(seq + slots as u64), d.slot_addr(seq));
        }
        assert_eq!(d.slot_write_len(cap), Some(SLOT_PAYLOAD_OFFSET + cap));
        assert_eq!(d.slot_write_len(cap + 1), None);
    }

    #[test]
    fn encoded_header_and_trailer_publish_like_a_local_writer() {
        // Emulate the NIC: copy the encoded bytes into a host ring at the
        // descriptor's addresses, then read the frame with the ring reader.
        let (slots, cap) = (2usize, 64usize);
        let ring = host_ring(slots, cap);
        let mut d = descriptor(slots as u32, cap as u32);
        d.ring_addr = ring.memory().as_ptr() as u64;
        let frame = RemoteFrame {
            ring_seq: 1,
            frame_seq: 77,
            stream_id: 3,
            payload_len: 5,
            sender_ts_ns: 1_000,
            posted_ns: 2_000,
        };
        let mut staging = vec![0u8; d.slot_write_len(5).unwrap()];
        frame.encode_header(&mut staging);
        staging[SLOT_PAYLOAD_OFFSET..].copy_from_slice(b"hello");
        // SAFETY: both writes lie inside the ring allocation (checked by the
        // descriptor geometry), and no reader is active yet.
        unsafe {
            std::ptr::copy_nonoverlapping(staging.as_ptr(), d.slot_addr(1) as *mut u8, staging.len());
            std::ptr::copy_nonoverlapping(trailer(1).as_ptr(), d.head_addr() as *mut u8, 8);
        }
        assert_eq!(ring.head(), 1);
        let mut reader = ring.reader().unwrap();
        let slot = reader.claim().expect("published frame");
        assert_eq!(slot.header.frame_seq, 77);
        assert_eq!(slot.header.stream_id, 3);
        assert_eq!(slot.header.flags, SLOT_COMPLETE);
        assert_eq!(slot.header.published_ns, 2_000);
        assert_eq!(slot.payload, b"hello");
    }

    #[test]
    fn consumer_state_decodes_both_words() {
        let mut b = [0u8; CONSUMER_READ_BYTES];
        b[..8].copy_from_slice(&9u64.to_le_bytes());
        b[64..].copy_from_slice(&7u64.to_le_bytes());
        assert_eq!(ConsumerState::decode(&b), ConsumerState { claimed: 9, consumed: 7 });
    }

    #[test]
    fn credit_window_refreshes_only_when_the_slot_is_not_proven_free() {
        let mut w = CreditWindow::new(4);
        for seq in 1..=4 {
            assert_eq!(w.check(seq), Credit::Write);
        }
        assert_eq!(w.check(5), Credit::Refresh);
        w.update(ConsumerState { claimed: 1, consumed: 0 });
        assert_eq!(w.check(5), Credit::Refresh, "sequence 1 is still being read");
        w.update(ConsumerState { claimed: 2, consumed: 1 });
        assert_eq!(w.check(5), Credit::Write);
        assert_eq!(w.check(6), Credit::Refresh, "sequence 2 is being read");
        w.update(ConsumerState { claimed: 4, consumed: 1 });
        assert_eq!(w.check(6), Credit::Write, "latest: the consumer skipped past 2");
        assert_eq!(w.check(7), Credit::Write);
        assert_eq!(w.check(8), Credit::Refresh, "sequence 4 is being read");
        w.update(ConsumerState { claimed: 1, consumed: 0 });
        assert_eq!(w.cached(), ConsumerState { claimed: 4, consumed: 1 }, "stale reads never go back");
    }

    proptest! {
        #[test]
        fn slots_stay_inside_the_ring(slots in 2u32..512, cap in 1u32..70_000, seq in 1u64..u64::MAX / 2) {
            let d = descriptor(slots, cap);
            let start = d.slot_addr(seq);
            prop_assert!(start >= d.ring_addr + SLOTS_OFFSET as u64);
            let end = start + d.slot_write_len(cap as usize).unwrap() as u64;
            prop_assert!(end <= d.ring_addr + d.ring_len);
            prop_assert_eq!((start - d.ring_addr - SLOTS_OFFSET as u64) % d.slot_stride as u64, 0);
        }

        #[test]
        fn writable_never_hands_out_a_slot_the_consumer_may_read(
            slots in 2u64..64, consumed in 0u64..1000, ahead in 0u64..3, beyond in 1u64..200,
        ) {
            // The consumer reads `claimed` (claimed > consumed) or nothing;
            // the writer only writes sequences past everything published.
            let claimed = consumed + ahead;
            let seq = claimed.max(consumed) + beyond;
            let state = ConsumerState { claimed, consumed };
            if slot_writable(seq, slots, state) && ahead > 0 {
                let same_slot = (seq - 1) % slots == (claimed - 1) % slots;
                prop_assert!(!(same_slot && seq != claimed), "seq {} would overwrite claimed {}", seq, claimed);
            }
        }
    }
}
