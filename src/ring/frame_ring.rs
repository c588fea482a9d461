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
//!
//! A ring in device-only memory (GPU memory a NIC writes) follows the same
//! protocol, but neither end is on the host: the remote sensor writes, the
//! GPU handler consumes. The host writes the header once with a copy and
//! reads the sequence words back with copies ([`FrameRing::sequences`]);
//! it has no [`RingWriter`] or [`RingReader`] for such a ring.

use super::layout::*;
use super::memory::{CopyError, RingMemory};
use super::reader_wake::ReaderWake;
use std::mem::{offset_of, size_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
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
#[non_exhaustive]
pub enum RingError {
    /// The ring's memory is smaller than the ring needs; allocate it with `ring_bytes()`.
    #[error("ring needs {needed} bytes but its memory has {available}; allocate it with ring_bytes()")]
    TooSmall { needed: usize, available: usize },
    /// The ring's memory is not 256-byte aligned; allocate it with the ring's memory kinds.
    #[error("ring memory is not 256-byte aligned; allocate it with one of the ring's memory kinds")]
    Misaligned,
    /// Fewer than 2 slots; set `ring.slots` to 2 or more.
    #[error("slot_count must be at least 2 (got {0}); set ring.slots to 2 or more")]
    TooFewSlots(usize),
    /// A slot payload capacity of 0 or above 1 GiB; set `ring.slot_bytes` within range.
    #[error("payload capacity must be between 1 byte and 1 GiB (got {0}); set ring.slot_bytes")]
    BadCapacity(usize),
    /// Device-only ring memory without a device address; give the memory one, or allocate the ring
    /// mapped (host and device).
    #[error(
        "device-only ring memory ({0}) has no device address; it cannot hold a ring: give the memory a device address, or allocate the ring mapped (host and device)"
    )]
    NoDeviceAddress(&'static str),
    /// A ring larger than the address space; lower `ring.slots` or `ring.slot_bytes`.
    #[error(
        "a ring of {slots} slots of {slot_bytes} bytes does not fit in the address space; lower ring.slots or ring.slot_bytes"
    )]
    TooLarge { slots: usize, slot_bytes: usize },
    /// A result ring of 0 or too many results; set `ring.results` within range.
    #[error("the result ring must hold between 1 and 4294967294 results (got {0}); set ring.results")]
    BadResultCapacity(usize),
    /// Result ring memory the host cannot read; allocate it mapped (host and device).
    #[error(
        "result ring memory ({0}) has no host view; the host result thread cannot read it: allocate it mapped (host and device)"
    )]
    NoHostView(&'static str),
    /// The ring's header could not be written to the GPU; restart the process (the CUDA context is
    /// unusable).
    #[error("cannot write the header of the GPU ring: {0}")]
    HeaderCopy(#[from] CopyError),
}

/// Reserving a slot failed: the consumer still owns the slot that would be reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("frame ring full: slot for ring sequence {seq} is still owned by the consumer")]
pub struct RingFull {
    pub seq: u64,
}

/// The three sequence words of a ring's header, read together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingSequences {
    /// Newest published ring sequence.
    pub head: u64,
    /// Ring sequence the consumer is reading (or last read).
    pub claimed: u64,
    /// Newest ring sequence the consumer has finished.
    pub consumed: u64,
}

/// Byte range of the header that holds the three sequence words.
const SEQUENCES_OFFSET: usize = offset_of!(RingHeader, head_seq);
const SEQUENCES_LEN: usize = offset_of!(RingHeader, consumed_seq) + 8 - SEQUENCES_OFFSET;

/// A header with the given geometry and all sequences 0.
fn initial_header(
    slot_count: usize,
    stride: usize,
    payload_capacity: usize,
    policy: OverrunPolicy,
) -> RingHeader {
    RingHeader {
        magic: RING_MAGIC,
        version: RING_LAYOUT_VERSION,
        slot_count: slot_count as u32,
        slot_stride: stride as u32,
        payload_capacity: payload_capacity as u32,
        policy: policy.code(),
        slots_offset: SLOTS_OFFSET as u32,
        _reserved0: [0; 9],
        head_seq: AtomicU64::new(0),
        _pad1: [0; 7],
        claimed_seq: AtomicU64::new(0),
        _pad2: [0; 7],
        consumed_seq: AtomicU64::new(0),
        _pad3: [0; 7],
    }
}

/// The header's bytes as the ring layout stores them.
fn header_bytes(h: &RingHeader) -> &[u8] {
    // SAFETY: RingHeader is repr(C) plain integers and atomics with no padding
    // (its size is exactly the sum of its fields, checked in layout.rs); the
    // slice borrows `h` and covers exactly its bytes.
    unsafe { std::slice::from_raw_parts((h as *const RingHeader).cast::<u8>(), size_of::<RingHeader>()) }
}

/// The sequence words of a header, each loaded with acquire.
fn load_sequences(h: &RingHeader) -> RingSequences {
    RingSequences {
        head: h.head_seq.load(Ordering::Acquire),
        claimed: h.claimed_seq.load(Ordering::Acquire),
        consumed: h.consumed_seq.load(Ordering::Acquire),
    }
}

/// A frame ring over some [`RingMemory`].
pub struct FrameRing {
    /// Invariant: `mem.len() >= ring_bytes(slot_count, payload_capacity)` and
    /// the header at offset 0 was initialised by [`FrameRing::new`].
    mem: Box<dyn RingMemory>,
    /// For device-only memory, the host's copy of the header: the geometry
    /// written at creation and the sequence words as last read back (they
    /// only grow). Invariant: `Some` exactly when `mem` is device-only.
    device_header: Option<Box<RingHeader>>,
    /// Set once a failed read-back of a device-only header has been logged.
    copy_failure_logged: AtomicBool,
    slot_count: usize,
    stride: usize,
    payload_capacity: usize,
    policy: OverrunPolicy,
    writer_taken: AtomicBool,
    reader_taken: AtomicBool,
    /// A host thread asleep in [`FrameRing::wait_published_past`], which the
    /// host writer wakes on every publication.
    wake: ReaderWake,
}

impl FrameRing {
    /// Lays a ring out in `mem` (which must be zeroed) and writes its header:
    /// in place for host-addressable memory, with one copy for device-only
    /// memory.
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
        let too_large = RingError::TooLarge { slots: slot_count, slot_bytes: payload_capacity };
        // The header stores the slot count as a u32.
        if u32::try_from(slot_count).is_err() {
            return Err(too_large);
        }
        let (Some(needed), Some(stride)) =
            (ring_bytes(slot_count, payload_capacity), slot_stride(payload_capacity))
        else {
            return Err(too_large);
        };
        if mem.len() < needed {
            return Err(RingError::TooSmall { needed, available: mem.len() });
        }
        let header = initial_header(slot_count, stride, payload_capacity, policy);
        let device_header = match mem.device_copies() {
            None => {
                if !(mem.as_ptr() as usize).is_multiple_of(256) {
                    return Err(RingError::Misaligned);
                }
                // SAFETY: host-addressable memory of at least `needed` bytes,
                // 256-byte aligned (checked above), that nobody else references
                // yet; RingHeader is plain integers and atomics.
                unsafe { std::ptr::write(mem.as_ptr().cast::<RingHeader>(), header) };
                None
            }
            Some(copies) => {
                let dptr = mem.device_ptr().ok_or(RingError::NoDeviceAddress(mem.kind()))?;
                if !dptr.is_multiple_of(256) {
                    return Err(RingError::Misaligned);
                }
                copies.write_in_order(&[(0, header_bytes(&header))])?;
                Some(Box::new(header))
            }
        };
        debug_assert_eq!(device_header.is_some(), !mem.is_host_addressable());
        Ok(Arc::new(FrameRing {
            stride,
            mem,
            device_header,
            copy_failure_logged: AtomicBool::new(false),
            slot_count,
            payload_capacity,
            policy,
            writer_taken: AtomicBool::new(false),
            reader_taken: AtomicBool::new(false),
            wake: ReaderWake::default(),
        }))
    }

    /// The shared header. For a device-only ring this is the host's copy,
    /// its sequence words refreshed from the device by this call (or left
    /// as last read if the copy fails); storing into it changes nothing on
    /// the device.
    pub fn header(&self) -> &RingHeader {
        match &self.device_header {
            Some(h) => {
                self.refresh_sequences();
                h
            }
            // SAFETY: host-addressable memory initialised in `new`; fields
            // mutated after that are atomics.
            None => unsafe { &*(self.mem.as_ptr() as *const RingHeader) },
        }
    }

    /// True when the ring lives in memory only a device addresses (the host
    /// reads its sequence words with copies and has no writer or reader).
    pub fn is_device_only(&self) -> bool {
        self.device_header.is_some()
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

    /// Head, claimed and consumed sequences now: acquire loads on the host,
    /// one device-to-host copy of the three words for a device-only ring.
    pub fn try_sequences(&self) -> Result<RingSequences, CopyError> {
        let Some(copies) = self.mem.device_copies() else {
            return Ok(load_sequences(self.header()));
        };
        let mut bytes = [0u8; SEQUENCES_LEN];
        copies.read(SEQUENCES_OFFSET, &mut bytes)?;
        let word = |field: usize| {
            let at = field - SEQUENCES_OFFSET;
            u64::from_ne_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
        };
        Ok(RingSequences {
            head: word(offset_of!(RingHeader, head_seq)),
            claimed: word(offset_of!(RingHeader, claimed_seq)),
            consumed: word(offset_of!(RingHeader, consumed_seq)),
        })
    }

    /// As [`FrameRing::try_sequences`]; for a device-only ring whose copy
    /// fails (a faulted context), the values last read (the failure is logged once).
    pub fn sequences(&self) -> RingSequences {
        load_sequences(self.header())
    }

    /// Reads a device-only ring's sequence words into the host copy of its header.
    fn refresh_sequences(&self) {
        let Some(h) = &self.device_header else { return };
        match self.try_sequences() {
            Ok(s) => {
                // Several threads may refresh at once; sequences never go
                // back, so the newest read wins.
                h.head_seq.fetch_max(s.head, Ordering::AcqRel);
                h.claimed_seq.fetch_max(s.claimed, Ordering::AcqRel);
                h.consumed_seq.fetch_max(s.consumed, Ordering::AcqRel);
            }
            Err(e) => {
                if !self.copy_failure_logged.swap(true, Ordering::AcqRel) {
                    tracing::warn!(
                        "reading the GPU ring's sequences failed ({e}); reporting the last values read"
                    );
                }
            }
        }
    }

    /// Newest published ring sequence (acquire; a copy for a device-only ring).
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    /// Blocks the calling thread until the head passes `seen` or `timeout`
    /// elapses (or, rarely, spuriously earlier); returns whether it passed.
    /// The host [`RingWriter`] wakes it on every publication, so a thread
    /// that waits for what follows a frame (the result thread, where a
    /// device writes the results and cannot wake it) can sleep until a frame
    /// is on its way. One waiting thread at a time; host-addressable rings
    /// only (a device-only ring returns at once).
    pub fn wait_published_past(&self, seen: u64, timeout: Duration) -> bool {
        if self.is_device_only() {
            return self.head() > seen;
        }
        self.wake.wait(timeout, || self.head() > seen)
    }
    /// Ring sequence the consumer claimed last (acquire; a copy for a device-only ring).
    pub fn claimed(&self) -> u64 {
        self.header().claimed_seq.load(Ordering::Acquire)
    }
    /// Newest ring sequence the consumer has finished (acquire; a copy for a device-only ring).
    pub fn consumed(&self) -> u64 {
        self.header().consumed_seq.load(Ordering::Acquire)
    }

    /// The slot (0-based) that holds ring sequence `seq` (>= 1).
    fn slot_index(&self, seq: u64) -> usize {
        debug_assert!(seq > 0);
        ((seq - 1) % self.slot_count as u64) as usize
    }

    fn slot_base(&self, seq: u64) -> *mut u8 {
        self.slot_base_at(self.slot_index(seq))
    }

    /// Host address of slot `index` (below the slot count).
    fn slot_base_at(&self, index: usize) -> *mut u8 {
        assert!(index < self.slot_count, "slot {index} of a {}-slot ring", self.slot_count);
        debug_assert!(!self.is_device_only(), "slots of a device-only ring have no host address");
        // SAFETY: index < slot_count (checked above), so the slot lies inside the allocation.
        unsafe { self.mem.as_ptr().add(SLOTS_OFFSET + index * self.stride) }
    }

    /// Takes the single writer handle; `None` if it was taken before, or if
    /// the ring is device-only (its writer is remote: see
    /// [`FrameRing::take_writer_for_remote`]).
    pub fn writer(self: &Arc<Self>) -> Option<RingWriter> {
        if self.is_device_only() || self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        let head = self.head();
        let last_slot = (0, std::ptr::null_mut());
        Some(RingWriter { ring: Arc::clone(self), published: head, next: head + 1, last_slot })
    }

    /// Marks the writer side as taken by a remote writer (an RDMA sensor
    /// writes the slots and the head sequence itself); false if it was taken.
    pub fn take_writer_for_remote(&self) -> bool {
        !self.writer_taken.swap(true, Ordering::AcqRel)
    }

    /// Takes the single consumer handle; `None` if it was taken before (or the
    /// consumer is a GPU handler that reads the ring itself), or if the ring is
    /// device-only (only a GPU handler can consume it).
    pub fn reader(self: &Arc<Self>) -> Option<RingReader> {
        if self.is_device_only() || self.reader_taken.swap(true, Ordering::AcqRel) {
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
    /// The last sequence looked up and its slot's host address (sequence
    /// 0: none). A frame's datagrams all go to one slot, so nearly every
    /// lookup is that one and skips the division, the bounds check and the
    /// memory's address call. Invariant: for a sequence `s > 0` the address
    /// is `FrameRing::slot_base(s)` (checked on every lookup in debug
    /// builds); the ring's memory never moves while the ring lives.
    last_slot: (u64, *mut u8),
}

// SAFETY: the only field that is not `Send` by itself is `last_slot`'s
// address, which points into the memory of the ring this writer keeps alive
// through its `Arc` (`RingMemory` is `Send + Sync` and never moves); the
// writer is the ring's single producer wherever it runs.
unsafe impl Send for RingWriter {}

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
        let base = self.reserved_slot_base(seq);
        // SAFETY: the slot is reserved by this (unique) writer and unpublished,
        // and `writable` established that the consumer no longer reads it; the
        // payload lies inside the slot stride.
        unsafe { std::slice::from_raw_parts_mut(base.add(SLOT_PAYLOAD_OFFSET), self.ring.payload_capacity) }
    }

    /// Reports that the first `bytes` payload bytes of reserved, unpublished
    /// slot `seq` are final: one release store of the slot header's
    /// [`SlotHeader::received_mark`], so that a consumer may copy them while
    /// the rest of the frame arrives. The caller must not write those bytes
    /// again before the slot is published, and passes the same mark in the
    /// header it publishes.
    ///
    /// # Panics
    /// If `seq` is not reserved by this writer.
    pub fn mark_received(&mut self, seq: u64, bytes: u32) {
        assert!(seq > self.published && seq < self.next, "ring sequence {seq} is not reserved");
        let at = offset_of!(SlotHeader, received_mark);
        // SAFETY: the slot is reserved by this writer (see `payload_mut`) and
        // its header lies inside the slot; the slot is 256-byte aligned and the
        // word's offset a multiple of 8, as AtomicU64 needs. A consumer on the
        // device reads the word concurrently, which an atomic store permits.
        let word = unsafe { AtomicU64::from_ptr(self.reserved_slot_base(seq).add(at).cast::<u64>()) };
        word.store(received_mark(seq, bytes), Ordering::Release);
    }

    /// Host address of the slot of `seq`, through the one-entry cache.
    fn reserved_slot_base(&mut self, seq: u64) -> *mut u8 {
        if self.last_slot.0 != seq {
            self.last_slot = (seq, self.ring.slot_base(seq));
        }
        debug_assert_eq!(self.last_slot.1, self.ring.slot_base(seq));
        self.last_slot.1
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
        unsafe { std::ptr::write_volatile(self.reserved_slot_base(seq) as *mut SlotHeader, h) };
        self.ring.header().head_seq.store(seq, Ordering::Release);
        self.published = seq;
        self.ring.wake.wake();
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
    use crate::ring::memory::FakeDeviceMemory;

    fn ring(slots: usize, cap: usize, policy: OverrunPolicy) -> Arc<FrameRing> {
        let mem = HostMemory::new(ring_bytes(slots, cap).unwrap()).unwrap();
        FrameRing::new(Box::new(mem), slots, cap, policy).unwrap()
    }

    fn fill(w: &mut RingWriter, seq: u64, byte: u8) {
        let p = w.payload_mut(seq);
        p[..8].fill(byte);
        w.publish(seq, &SlotHeader { payload_len: 8, frame_seq: byte as u64, ..Default::default() });
    }

    #[test]
    fn writes_to_several_reserved_slots_in_turn_land_in_each_ones_slot() {
        // The writer caches the last slot it looked up; frames in flight
        // are written in any order, across the ring's wrap.
        let r = ring(3, 64, OverrunPolicy::Latest);
        let mut w = r.writer().unwrap();
        let mut rd = r.reader().unwrap();
        for round in 0..4u64 {
            let seqs = [w.reserve().unwrap(), w.reserve().unwrap()];
            for seq in seqs {
                w.payload_mut(seq)[..4].fill(0);
            }
            for (i, &seq) in seqs.iter().chain(seqs.iter().rev()).enumerate() {
                w.payload_mut(seq)[i] = seq as u8;
                w.mark_received(seq, i as u32 + 1);
            }
            for seq in seqs {
                w.publish(seq, &SlotHeader { payload_len: 4, frame_seq: seq, ..Default::default() });
                let c = rd.claim().unwrap();
                let s = seq as u8;
                let expected = if seq == seqs[0] { [s, 0, 0, s] } else { [0, s, s, 0] };
                assert_eq!((c.seq, &c.payload[..4]), (seq, &expected[..]), "round {round}");
                assert_eq!(c.header.frame_seq, seq);
                rd.finish(seq);
            }
        }
    }

    #[test]
    fn a_publication_wakes_a_thread_waiting_far_longer() {
        let r = ring(32, 64, OverrunPolicy::Every);
        let mut w = r.writer().unwrap();
        let waiting = Arc::clone(&r);
        crate::ring::reader_wake::check_a_publication_wakes_the_waiter(
            move |seen, timeout| waiting.wait_published_past(seen, timeout),
            |round| {
                let seq = w.reserve().unwrap();
                fill(&mut w, seq, round as u8);
            },
        );
    }

    #[test]
    fn waiting_with_no_publication_ends_at_the_timeout_and_says_so() {
        let r = ring(4, 64, OverrunPolicy::Latest);
        let mut w = r.writer().unwrap();
        assert!(!r.wait_published_past(0, Duration::from_millis(5)));
        let seq = w.reserve().unwrap();
        fill(&mut w, seq, 1);
        assert!(r.wait_published_past(0, Duration::from_secs(60)), "the head is already past 0: no wait");
        assert!(!r.wait_published_past(1, Duration::from_millis(5)));
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

    /// A ring in (emulated) device-only memory and a handle on that memory.
    fn device_ring(
        slots: usize,
        cap: usize,
        policy: OverrunPolicy,
    ) -> (Arc<FrameRing>, Arc<FakeDeviceMemory>) {
        let mem = Arc::new(FakeDeviceMemory::new(ring_bytes(slots, cap).unwrap(), 0x7f00_0020_0000));
        let ring = FrameRing::new(Box::new(SharedFake(Arc::clone(&mem))), slots, cap, policy).unwrap();
        (ring, mem)
    }

    /// Lets a test keep a handle on the fake memory the ring owns.
    struct SharedFake(Arc<FakeDeviceMemory>);
    // SAFETY: delegates to FakeDeviceMemory, which is device-only.
    unsafe impl RingMemory for SharedFake {
        fn as_ptr(&self) -> *mut u8 {
            self.0.as_ptr()
        }
        fn len(&self) -> usize {
            self.0.len()
        }
        fn device_ptr(&self) -> Option<u64> {
            self.0.device_ptr()
        }
        fn kind(&self) -> &'static str {
            self.0.kind()
        }
        fn device_copies(&self) -> Option<&dyn crate::ring::DeviceCopies> {
            Some(&*self.0)
        }
    }

    fn u32_at(bytes: &[u8], offset: usize) -> u32 {
        u32::from_ne_bytes(bytes[offset..offset + 4].try_into().unwrap())
    }

    #[test]
    fn device_ring_header_is_written_with_one_copy_as_the_layout_says() {
        let (ring, mem) = device_ring(6, 1000, OverrunPolicy::Latest);
        assert!(ring.is_device_only());
        assert_eq!(*mem.log.lock().unwrap(), [(true, 0, 256)], "one copy of the whole header");
        let bytes = mem.bytes.lock().unwrap().clone();
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, magic)), RING_MAGIC);
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, version)), RING_LAYOUT_VERSION);
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, slot_count)), 6);
        assert_eq!(
            u32_at(&bytes, std::mem::offset_of!(RingHeader, slot_stride)),
            slot_stride(1000).unwrap() as u32
        );
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, payload_capacity)), 1000);
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, policy)), POLICY_LATEST);
        assert_eq!(u32_at(&bytes, std::mem::offset_of!(RingHeader, slots_offset)), SLOTS_OFFSET as u32);
        assert!(bytes[64..].iter().all(|&b| b == 0), "sequences start at 0 and the slots stay untouched");
        let h = ring.header();
        assert_eq!((h.magic, h.slot_count, h.payload_capacity), (RING_MAGIC, 6, 1000));
    }

    #[test]
    fn device_ring_sequences_are_read_back_with_copies() {
        let (ring, mem) = device_ring(4, 64, OverrunPolicy::Every);
        // What the remote writer and the GPU handler store on the device.
        mem.store_u64(64, 9);
        mem.store_u64(128, 8);
        mem.store_u64(192, 7);
        mem.log.lock().unwrap().clear();
        assert_eq!(ring.try_sequences(), Ok(RingSequences { head: 9, claimed: 8, consumed: 7 }));
        assert_eq!((ring.head(), ring.claimed(), ring.consumed()), (9, 8, 7));
        let h = ring.header();
        assert_eq!(h.head_seq.load(Ordering::Acquire), 9, "header() refreshes the host copy");
        let log = mem.log.lock().unwrap();
        assert!(!log.is_empty() && log.iter().all(|&(write, off, len)| !write && off == 64 && len == 136));
    }

    #[test]
    fn device_ring_keeps_the_last_values_when_a_read_back_fails() {
        let (ring, mem) = device_ring(4, 64, OverrunPolicy::Every);
        mem.store_u64(64, 5);
        mem.store_u64(192, 3);
        assert_eq!(ring.sequences(), RingSequences { head: 5, claimed: 0, consumed: 3 });
        mem.fail.store(true, Ordering::Relaxed);
        mem.store_u64(64, 6);
        assert!(matches!(ring.try_sequences(), Err(CopyError::Device { .. })));
        assert_eq!((ring.head(), ring.consumed()), (5, 3), "last values read, not garbage");
        mem.fail.store(false, Ordering::Relaxed);
        assert_eq!(ring.head(), 6);
    }

    #[test]
    fn device_ring_has_no_host_writer_or_reader_but_remote_and_gpu_ends() {
        let (ring, _mem) = device_ring(4, 64, OverrunPolicy::Every);
        assert!(ring.writer().is_none(), "the host cannot write device-only slots");
        assert!(ring.reader().is_none(), "the host cannot read device-only slots");
        assert!(ring.take_writer_for_remote());
        assert!(!ring.take_writer_for_remote(), "one remote writer");
        assert!(ring.take_reader_for_device());
        assert!(!ring.take_reader_for_device());
    }

    #[test]
    fn device_ring_is_refused_without_an_aligned_device_address_or_when_the_header_copy_fails() {
        let bytes = ring_bytes(4, 64).unwrap();
        let misaligned = FakeDeviceMemory::new(bytes, 0x1000_0040);
        assert!(matches!(
            FrameRing::new(Box::new(misaligned), 4, 64, OverrunPolicy::Every),
            Err(RingError::Misaligned)
        ));
        let failing = FakeDeviceMemory::new(bytes, 0x1000_0000);
        failing.fail.store(true, Ordering::Relaxed);
        let err = FrameRing::new(Box::new(failing), 4, 64, OverrunPolicy::Every).err().unwrap();
        assert!(matches!(err, RingError::HeaderCopy(CopyError::Device { .. })), "{err}");
        let small = FakeDeviceMemory::new(bytes - 1, 0x1000_0000);
        assert!(matches!(
            FrameRing::new(Box::new(small), 4, 64, OverrunPolicy::Every),
            Err(RingError::TooSmall { .. })
        ));
    }

    #[test]
    fn host_ring_writer_taken_for_remote_blocks_the_local_writer() {
        let r = ring(4, 64, OverrunPolicy::Every);
        assert!(r.take_writer_for_remote());
        assert!(r.writer().is_none());
        assert!(!r.is_device_only());
        assert_eq!(r.try_sequences(), Ok(RingSequences::default()));
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
        let mem = HostMemory::new(1 << 20).unwrap();
        let err = FrameRing::new(Box::new(mem), usize::MAX / 2, 64, OverrunPolicy::Every).err().unwrap();
        assert!(matches!(err, RingError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("ring.slots"), "{err}");
        let mem = HostMemory::new(1 << 20).unwrap();
        let slots = u32::MAX as usize + 1;
        assert!(matches!(
            FrameRing::new(Box::new(mem), slots, 1, OverrunPolicy::Every),
            Err(RingError::TooLarge { .. })
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
        let mem = HostMemory::new(ring_bytes(slots, cap).unwrap()).unwrap();
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
