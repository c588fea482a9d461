//! The frame ring: fixed slots in one allocation, one writer (ingest) and one
//! consumer (host loop or GPU handler), synchronised by sequence numbers only.
//!
//! Publish protocol: the writer fills a reserved slot's payload, writes its
//! [`SlotHeader`], then makes it visible with one release store of
//! `head_seq`. The consumer loads `head_seq` with acquire, picks a sequence
//! (the next one under policy `every`, the newest under `latest`), stores it in
//! `claimed_seq`, reads the slot, and stores `consumed_seq` with release when
//! done. The writer reuses the slot of sequence `s - slot_count` only when the
//! consumer has consumed it or claimed something newer, so it never writes a
//! slot the consumer may still be reading; otherwise `reserve` fails and the
//! caller counts an overrun.

use super::layout::*;
use super::memory::RingMemory;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use thiserror::Error;

/// Overrun policy: what happens when the consumer falls behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum OverrunPolicy {
    /// Process every frame; when the ring is full, drop new frames at ingest.
    #[default]
    Every,
    /// Real time: skip to the newest published frame, counting the skipped ones.
    Latest,
}

impl OverrunPolicy {
    /// The code stored in [`RingHeader::policy`].
    pub fn code(self) -> u32 {
        match self {
            OverrunPolicy::Every => POLICY_EVERY,
            OverrunPolicy::Latest => POLICY_LATEST,
        }
    }
}

/// Errors creating a ring.
#[derive(Debug, Error)]
pub enum RingError {
    #[error("ring needs {needed} bytes but its memory has {available}; allocate it with ring_bytes()")]
    TooSmall { needed: usize, available: usize },
    #[error("ring memory is not 256-byte aligned")]
    Misaligned,
    #[error("slot_count must be at least 2 (got {0}); set ring.slots to 2 or more")]
    TooFewSlots(usize),
    #[error("payload capacity must be between 1 byte and 1 GiB (got {0}); set ring.slot_bytes")]
    BadCapacity(usize),
}

/// Reserving a slot failed: the consumer still owns the slot that would be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("frame ring full: slot for ring sequence {seq} is still owned by the consumer")]
pub struct RingFull {
    pub seq: u64,
}

/// A frame ring over some [`RingMemory`].
pub struct FrameRing {
    /// Invariant: `mem.len() >= ring_bytes(slot_count, payload_capacity)` and
    /// the header at offset 0 was initialised by [`FrameRing::new`].
    mem: Box<dyn RingMemory>,
    slot_count: usize,
    stride: usize,
    payload_capacity: usize,
    policy: OverrunPolicy,
    writer_taken: AtomicBool,
    reader_taken: AtomicBool,
}

impl FrameRing {
    /// Lays a ring out in `mem` (which must be zeroed) and writes its header.
    pub fn new(
        mem: Box<dyn RingMemory>,
        slot_count: usize,
        payload_capacity: usize,
        policy: OverrunPolicy,
    ) -> Result<Arc<Self>, RingError> {
        if slot_count < 2 {
            return Err(RingError::TooFewSlots(slot_count));
        }
        if payload_capacity == 0 || payload_capacity > (1 << 30) {
            return Err(RingError::BadCapacity(payload_capacity));
        }
        let needed = ring_bytes(slot_count, payload_capacity);
        if mem.len() < needed {
            return Err(RingError::TooSmall { needed, available: mem.len() });
        }
        if !(mem.as_ptr() as usize).is_multiple_of(256) {
            return Err(RingError::Misaligned);
        }
        let ring = FrameRing {
            stride: slot_stride(payload_capacity),
            mem,
            slot_count,
            payload_capacity,
            policy,
            writer_taken: AtomicBool::new(false),
            reader_taken: AtomicBool::new(false),
        };
        // SAFETY: the memory is at least `needed` bytes, aligned, and nobody
        // else holds a reference yet; the header is plain integers and atomics.
        unsafe {
            let h = ring.mem.as_ptr() as *mut RingHeader;
            (*h).magic = RING_MAGIC;
            (*h).version = RING_LAYOUT_VERSION;
            (*h).slot_count = slot_count as u32;
            (*h).slot_stride = ring.stride as u32;
            (*h).payload_capacity = payload_capacity as u32;
            (*h).policy = policy.code();
            (*h).slots_offset = SLOTS_OFFSET as u32;
        }
        Ok(Arc::new(ring))
    }

    /// The shared header.
    pub fn header(&self) -> &RingHeader {
        // SAFETY: initialised in `new`; fields mutated after that are atomics.
        unsafe { &*(self.mem.as_ptr() as *const RingHeader) }
    }

    pub fn slot_count(&self) -> usize {
        self.slot_count
    }
    pub fn payload_capacity(&self) -> usize {
        self.payload_capacity
    }
    pub fn slot_stride(&self) -> usize {
        self.stride
    }
    pub fn policy(&self) -> OverrunPolicy {
        self.policy
    }
    /// The memory the ring lives in (for device pointers and registration).
    pub fn memory(&self) -> &dyn RingMemory {
        &*self.mem
    }

    /// Newest published ring sequence (acquire).
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }
    /// Newest ring sequence the consumer has finished (acquire).
    pub fn consumed(&self) -> u64 {
        self.header().consumed_seq.load(Ordering::Acquire)
    }

    fn slot_base(&self, seq: u64) -> *mut u8 {
        debug_assert!(seq > 0);
        let index = ((seq - 1) % self.slot_count as u64) as usize;
        // SAFETY: index < slot_count, so the slot lies inside the allocation.
        unsafe { self.mem.as_ptr().add(SLOTS_OFFSET + index * self.stride) }
    }

    /// Takes the single writer handle; `None` if it was taken before.
    pub fn writer(self: &Arc<Self>) -> Option<RingWriter> {
        if self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let head = self.head();
        Some(RingWriter { ring: Arc::clone(self), published: head, next: head + 1 })
    }

    /// Takes the single consumer handle; `None` if it was taken before (or the
    /// consumer is a GPU handler that reads the ring itself).
    pub fn reader(self: &Arc<Self>) -> Option<RingReader> {
        if self.reader_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let last = self.consumed();
        Some(RingReader { ring: Arc::clone(self), last })
    }

    /// Marks the consumer side as taken by an external consumer (the GPU).
    pub fn take_reader_for_device(&self) -> bool {
        !self.reader_taken.swap(true, Ordering::AcqRel)
    }
}

/// The single producer of a [`FrameRing`].
pub struct RingWriter {
    ring: Arc<FrameRing>,
    /// Invariant: `published` equals the ring's `head_seq`; `next > published`.
    published: u64,
    /// Next sequence `reserve` hands out; `published < s < next` are reserved.
    next: u64,
}

impl RingWriter {
    pub fn ring(&self) -> &Arc<FrameRing> {
        &self.ring
    }

    /// Number of reserved, not yet published slots.
    pub fn in_flight(&self) -> u64 {
        self.next - self.published - 1
    }

    /// True when the slot for `seq` may be written.
    fn writable(&self, seq: u64) -> bool {
        let n = self.ring.slot_count as u64;
        if seq <= n {
            return true;
        }
        let occupant = seq - n;
        let h = self.ring.header();
        occupant <= h.consumed_seq.load(Ordering::Acquire) || occupant < h.claimed_seq.load(Ordering::Acquire)
    }

    /// Reserves the next slot for a frame being assembled.
    pub fn reserve(&mut self) -> Result<u64, RingFull> {
        let seq = self.next;
        if !self.writable(seq) {
            return Err(RingFull { seq });
        }
        self.next += 1;
        Ok(seq)
    }

    /// Payload bytes of a reserved, unpublished slot.
    ///
    /// # Panics
    /// If `seq` is not reserved by this writer.
    pub fn payload_mut(&mut self, seq: u64) -> &mut [u8] {
        assert!(seq > self.published && seq < self.next, "ring sequence {seq} is not reserved");
        let base = self.ring.slot_base(seq);
        // SAFETY: the slot is reserved by this (unique) writer and unpublished,
        // and `writable` established that the consumer no longer reads it; the
        // payload lies inside the slot stride.
        unsafe { std::slice::from_raw_parts_mut(base.add(SLOT_PAYLOAD_OFFSET), self.ring.payload_capacity) }
    }

    /// Publishes the oldest reserved slot: writes its header and makes it
    /// visible with one release store of the head sequence.
    ///
    /// # Panics
    /// If `seq` is not the oldest reserved sequence (publishing is in order).
    pub fn publish(&mut self, seq: u64, header: &SlotHeader) {
        assert_eq!(seq, self.published + 1, "ring sequences are published in order");
        assert!(seq < self.next, "ring sequence {seq} was never reserved");
        debug_assert!(header.payload_len as usize <= self.ring.payload_capacity);
        let mut h = *header;
        h.ring_seq = seq;
        h.payload_len = h.payload_len.min(self.ring.payload_capacity as u32);
        // SAFETY: the slot is reserved by this writer (see `payload_mut`); the
        // header occupies the first 128 bytes of the slot.
        unsafe { std::ptr::write_volatile(self.ring.slot_base(seq) as *mut SlotHeader, h) };
        self.ring.header().head_seq.store(seq, Ordering::Release);
        self.published = seq;
    }
}

/// The host consumer of a [`FrameRing`].
pub struct RingReader {
    ring: Arc<FrameRing>,
    /// Invariant: equals the ring's `consumed_seq` between claims.
    last: u64,
}

/// A slot the reader has claimed; valid until [`RingReader::finish`].
pub struct ClaimedSlot<'a> {
    pub seq: u64,
    pub header: SlotHeader,
    pub payload: &'a [u8],
    /// Published frames skipped to reach this one (policy `latest`).
    pub skipped: u64,
}

impl RingReader {
    pub fn ring(&self) -> &Arc<FrameRing> {
        &self.ring
    }

    /// Newest published sequence.
    pub fn head(&self) -> u64 {
        self.ring.head()
    }

    /// True when a published frame is waiting.
    pub fn ready(&self) -> bool {
        self.ring.head() != self.last
    }

    /// Claims the next frame to process under the ring's policy, if any.
    pub fn claim(&mut self) -> Option<ClaimedSlot<'_>> {
        let h = self.ring.header();
        let head = h.head_seq.load(Ordering::Acquire);
        if head == self.last {
            return None;
        }
        let seq = match self.ring.policy {
            OverrunPolicy::Every => self.last + 1,
            OverrunPolicy::Latest => head,
        };
        h.claimed_seq.store(seq, Ordering::Release);
        let base = self.ring.slot_base(seq);
        // SAFETY: `seq <= head` was published (acquire above orders these reads
        // after the writer's stores) and the writer will not reuse the slot
        // until we store a consumed or claimed sequence past it.
        let header = unsafe { std::ptr::read_volatile(base as *const SlotHeader) };
        debug_assert_eq!(header.ring_seq, seq);
        let len = (header.payload_len as usize).min(self.ring.payload_capacity);
        // SAFETY: as above; `len` is clamped to the slot capacity.
        let payload = unsafe { std::slice::from_raw_parts(base.add(SLOT_PAYLOAD_OFFSET), len) };
        Some(ClaimedSlot { seq, header, payload, skipped: seq - self.last - 1 })
    }

    /// Releases a claimed slot back to the writer.
    pub fn finish(&mut self, seq: u64) {
        debug_assert!(seq > self.last);
        self.last = seq;
        self.ring.header().consumed_seq.store(seq, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::HostMemory;

    fn ring(slots: usize, cap: usize, policy: OverrunPolicy) -> Arc<FrameRing> {
        let mem = HostMemory::new(ring_bytes(slots, cap)).unwrap();
        FrameRing::new(Box::new(mem), slots, cap, policy).unwrap()
    }

    fn fill(w: &mut RingWriter, seq: u64, byte: u8) {
        let p = w.payload_mut(seq);
        p[..8].fill(byte);
        w.publish(seq, &SlotHeader { payload_len: 8, frame_seq: byte as u64, ..Default::default() });
    }

    #[test]
    fn every_policy_processes_all_and_blocks_when_full() {
        let r = ring(3, 64, OverrunPolicy::Every);
        let mut w = r.writer().unwrap();
        let mut rd = r.reader().unwrap();
        assert!(r.writer().is_none());
        for i in 1..=3u64 {
            let s = w.reserve().unwrap();
            assert_eq!(s, i);
            fill(&mut w, s, i as u8);
        }
        assert_eq!(w.reserve(), Err(RingFull { seq: 4 }));
        let c = rd.claim().unwrap();
        assert_eq!((c.seq, c.skipped, c.payload[0]), (1, 0, 1));
        // Claimed but not finished: slot 1 still owned by the consumer.
        assert!(w.reserve().is_err());
        rd.finish(1);
        assert_eq!(w.reserve(), Ok(4));
    }

    #[test]
    fn latest_policy_skips_and_frees_skipped_slots() {
        let r = ring(4, 64, OverrunPolicy::Latest);
        let mut w = r.writer().unwrap();
        let mut rd = r.reader().unwrap();
        for i in 1..=4u64 {
            let s = w.reserve().unwrap();
            fill(&mut w, s, i as u8);
        }
        let c = rd.claim().unwrap();
        assert_eq!((c.seq, c.skipped, c.payload[0]), (4, 3, 4));
        // Slots 1..3 were skipped: the writer may reuse them, but not slot 4.
        assert_eq!(w.reserve(), Ok(5));
        assert_eq!(w.reserve(), Ok(6));
        assert_eq!(w.reserve(), Ok(7));
        assert_eq!(w.reserve(), Err(RingFull { seq: 8 }));
        rd.finish(4);
        assert_eq!(w.reserve(), Ok(8));
    }

    #[test]
    fn rejects_bad_geometry() {
        let mem = HostMemory::new(1024).unwrap();
        assert!(matches!(
            FrameRing::new(Box::new(mem), 4, 4096, OverrunPolicy::Every),
            Err(RingError::TooSmall { .. })
        ));
        let mem = HostMemory::new(1 << 20).unwrap();
        assert!(matches!(
            FrameRing::new(Box::new(mem), 1, 64, OverrunPolicy::Every),
            Err(RingError::TooFewSlots(1))
        ));
    }
}

#[cfg(test)]
mod protocol_props {
    //! The publish protocol under real concurrency: whatever the interleaving,
    //! the consumer only ever sees whole, correct frames, in order.
    use super::*;
    use crate::ring::HostMemory;
    use proptest::prelude::*;
    use std::thread;

    fn byte_of(frame: u64, i: usize) -> u8 {
        (frame as usize * 31 + i * 7) as u8
    }

    fn run(policy: OverrunPolicy, slots: usize, frames: u64, lens: Vec<usize>) {
        let cap = 512;
        let mem = HostMemory::new(ring_bytes(slots, cap)).unwrap();
        let ring = FrameRing::new(Box::new(mem), slots, cap, policy).unwrap();
        let mut w = ring.writer().unwrap();
        let mut rd = ring.reader().unwrap();
        let consumer = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut last_frame = 0u64;
            while last_frame < frames {
                let Some(c) = rd.claim() else {
                    std::hint::spin_loop();
                    continue;
                };
                let f = c.header.frame_seq;
                assert_eq!(c.header.ring_seq, c.seq);
                assert_eq!(c.payload.len(), c.header.payload_len as usize);
                for (i, b) in c.payload.iter().enumerate() {
                    assert_eq!(*b, byte_of(f, i), "frame {f} byte {i} torn");
                }
                assert!(f > last_frame, "frames out of order");
                last_frame = f;
                let seq = c.seq;
                seen.push(f);
                rd.finish(seq);
            }
            seen
        });
        let mut dropped = 0u64;
        for f in 1..=frames {
            let seq = loop {
                match w.reserve() {
                    Ok(s) => break s,
                    // The last frame must arrive so the consumer can stop; others may drop.
                    Err(_) if f == frames => std::hint::spin_loop(),
                    Err(_) => {
                        dropped += 1;
                        break 0;
                    }
                }
            };
            if seq == 0 {
                continue;
            }
            let len = lens[f as usize % lens.len()].min(cap);
            let p = w.payload_mut(seq);
            for (i, b) in p[..len].iter_mut().enumerate() {
                *b = byte_of(f, i);
            }
            w.publish(seq, &SlotHeader { frame_seq: f, payload_len: len as u32, ..Default::default() });
        }
        let seen = consumer.join().unwrap();
        if policy == OverrunPolicy::Every {
            assert_eq!(seen.len() as u64 + dropped, frames);
        }
        assert_eq!(*seen.last().unwrap(), frames);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn consumer_sees_only_whole_frames(
            slots in 2usize..6,
            frames in 1u64..400,
            lens in proptest::collection::vec(0usize..512, 1..8),
            latest in any::<bool>(),
        ) {
            let policy = if latest { OverrunPolicy::Latest } else { OverrunPolicy::Every };
            run(policy, slots, frames, lens);
        }
    }
}
