//! The transmit ring: one whole actuation datagram per slot, in memory the
//! loop writes (host memory for the host backend, pinned mapped host memory
//! the GPU writes for the CUDA backend), read by the host sender thread.
//!
//! Layout (`repr(C)`, mirrored for the CUDA side in `kernels/actuation.cuh`):
//! a [`TxRingHeader`] (256 bytes), then `slot_count` slots of `slot_stride`
//! bytes; each slot a [`TxSlotHeader`] (64 bytes) and the datagram right
//! after it at [`TX_DATAGRAM_OFFSET`], contiguous, so that a NIC given the
//! slot's address and length could send it as it is.
//!
//! Protocol. Message sequences are 1-based; sequence `s` lives in slot
//! `(s - 1) % slot_count`. The producer (the loop: one writer) of `s` first
//! checks `s - consumed_seq <= slot_count` (else the message is dropped and
//! counted in `dropped[output]`: the loop never waits), writes the datagram
//! and the slot header, stores the slot's `seq = s` with release, then
//! `head_seq = s` with release. The sender reads the head with acquire,
//! checks each slot's `seq`, sends the datagrams from the slots (the kernel's
//! copy is the only one), then stores `consumed_seq` with release: the slot
//! is the producer's again. Nothing is read torn, nothing is overwritten
//! unsent.

use super::ActuateError;
use crate::ring::RingMemory;
use crate::ring::reader_wake::ReaderWake;
use crate::wire::actuation::{MessageInput, MessageShape, form};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Magic of [`TxRingHeader`] ("FLTX").
pub const TX_MAGIC: u32 = u32::from_le_bytes(*b"FLTX");
/// Layout version; bump on any change and mirror it in `kernels/actuation.cuh`.
pub const TX_LAYOUT_VERSION: u32 = 1;
/// Byte offset of slot 0.
pub const TX_SLOTS_OFFSET: usize = 256;
/// Byte offset of the datagram inside a slot.
pub const TX_DATAGRAM_OFFSET: usize = 64;
/// Slots are padded to a multiple of this.
pub const TX_SLOT_ALIGN: usize = 64;
/// Outputs the header counts drops for.
pub const TX_MAX_OUTPUTS: usize = super::config::MAX_OUTPUTS;

/// Header of the transmit ring. Each word written by one side owns its line.
#[repr(C, align(64))]
pub struct TxRingHeader {
    pub magic: u32,
    pub version: u32,
    pub slot_count: u32,
    pub slot_stride: u32,
    /// The largest datagram a slot holds.
    pub max_datagram: u32,
    pub _reserved0: [u32; 11],
    /// Sequence of the newest whole message (producer: release store).
    pub head_seq: AtomicU64,
    pub _pad1: [u64; 7],
    /// Sequence of the newest message sent or given up (sender: release store).
    pub consumed_seq: AtomicU64,
    pub _pad2: [u64; 7],
    /// Messages of each output dropped because the ring was full (producer only).
    pub dropped: [AtomicU64; TX_MAX_OUTPUTS],
}

/// Header of one slot, before its datagram.
#[repr(C, align(64))]
pub struct TxSlotHeader {
    /// The message sequence this slot holds once whole (release store, last).
    pub seq: AtomicU64,
    /// When the frame's result was ready (ns; CLOCK_REALTIME on the host
    /// backend, `%globaltimer` on the GPU), for the ready-to-sent latency.
    pub ready_ns: u64,
    /// Datagram bytes.
    pub len: u32,
    /// The output (`[[actuate]]` index) it belongs to.
    pub output: u32,
    /// The frame's stream (where a reply goes).
    pub stream_id: u32,
    pub _reserved0: u32,
    pub _reserved1: [u64; 4],
}

const _: () = {
    assert!(std::mem::size_of::<TxRingHeader>() == TX_SLOTS_OFFSET);
    assert!(std::mem::size_of::<TxSlotHeader>() == TX_DATAGRAM_OFFSET);
};

/// Bytes between slots for datagrams of at most `max_datagram` bytes.
pub fn tx_slot_stride(max_datagram: usize) -> Option<usize> {
    TX_DATAGRAM_OFFSET.checked_add(max_datagram)?.checked_next_multiple_of(TX_SLOT_ALIGN)
}

/// Total bytes of a transmit ring, or `None` on overflow.
pub fn tx_ring_bytes(slots: usize, max_datagram: usize) -> Option<usize> {
    slots.checked_mul(tx_slot_stride(max_datagram)?)?.checked_add(TX_SLOTS_OFFSET)
}

/// A transmit ring over some host-addressable [`RingMemory`].
pub struct TxRing {
    /// Invariant: host-addressable, 64-byte aligned, at least
    /// `tx_ring_bytes(slot_count, max_datagram)` bytes, header initialised.
    mem: Box<dyn RingMemory>,
    slot_count: usize,
    slot_stride: usize,
    max_datagram: usize,
    writer_taken: AtomicBool,
    /// The sender parked between messages; a host producer wakes it.
    wake: ReaderWake,
}

impl TxRing {
    /// Lays a ring of `slots` slots for datagrams of at most `max_datagram`
    /// bytes out in zeroed `mem`.
    pub fn new(
        mem: Box<dyn RingMemory>,
        slots: usize,
        max_datagram: usize,
    ) -> Result<Arc<Self>, ActuateError> {
        let bad = ActuateError::RingGeometry { slots, max_datagram };
        if slots < 2 || slots > u32::MAX as usize || max_datagram > u32::MAX as usize {
            return Err(bad);
        }
        let (Some(stride), Some(needed)) = (tx_slot_stride(max_datagram), tx_ring_bytes(slots, max_datagram))
        else {
            return Err(bad);
        };
        if !mem.is_host_addressable() || mem.as_ptr().is_null() || !(mem.as_ptr() as usize).is_multiple_of(64)
        {
            return Err(ActuateError::RingMemory(mem.kind()));
        }
        if mem.len() < needed {
            return Err(ActuateError::RingTooSmall { needed, available: mem.len() });
        }
        // SAFETY: host-addressable, 64-byte aligned memory of at least
        // `needed >= 256` bytes (checked above) that nobody references yet.
        unsafe {
            let h = mem.as_ptr() as *mut TxRingHeader;
            (*h).magic = TX_MAGIC;
            (*h).version = TX_LAYOUT_VERSION;
            (*h).slot_count = slots as u32;
            (*h).slot_stride = stride as u32;
            (*h).max_datagram = max_datagram as u32;
        }
        Ok(Arc::new(Self {
            mem,
            slot_count: slots,
            slot_stride: stride,
            max_datagram,
            writer_taken: AtomicBool::new(false),
            wake: ReaderWake::default(),
        }))
    }

    /// A ring in ordinary host memory (the host backend's).
    pub fn host(slots: usize, max_datagram: usize) -> Result<Arc<Self>, ActuateError> {
        let needed =
            tx_ring_bytes(slots, max_datagram).ok_or(ActuateError::RingGeometry { slots, max_datagram })?;
        let mem = crate::ring::HostMemory::new(needed)
            .map_err(|source| ActuateError::Memory { len: needed, source })?;
        Self::new(Box::new(mem), slots, max_datagram)
    }

    pub fn slot_count(&self) -> usize {
        self.slot_count
    }

    pub fn slot_stride(&self) -> usize {
        self.slot_stride
    }

    pub fn max_datagram(&self) -> usize {
        self.max_datagram
    }

    /// The memory (what a device producer is given the address of).
    pub fn memory(&self) -> &dyn RingMemory {
        &*self.mem
    }

    fn header(&self) -> &TxRingHeader {
        // SAFETY: initialised in `new`; fields changed afterwards are atomics.
        unsafe { &*(self.mem.as_ptr() as *const TxRingHeader) }
    }

    /// Newest whole message.
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    /// Newest message the sender is done with.
    pub fn consumed(&self) -> u64 {
        self.header().consumed_seq.load(Ordering::Acquire)
    }

    /// Messages of `output` dropped because the ring was full.
    pub fn dropped(&self, output: usize) -> u64 {
        self.header().dropped.get(output).map_or(0, |d| d.load(Ordering::Relaxed))
    }

    /// Slot of sequence `seq` (> 0).
    fn slot(&self, seq: u64) -> *mut u8 {
        let index = ((seq - 1) % self.slot_count as u64) as usize;
        // SAFETY: index < slot_count and `new` checked that slot_count slots
        // of slot_stride bytes fit after TX_SLOTS_OFFSET.
        unsafe { self.mem.as_ptr().add(TX_SLOTS_OFFSET + index * self.slot_stride) }
    }

    fn slot_header(&self, seq: u64) -> &TxSlotHeader {
        // SAFETY: a slot starts with a 64-byte-aligned TxSlotHeader whose
        // only field changed concurrently (`seq`) is atomic.
        unsafe { &*(self.slot(seq) as *const TxSlotHeader) }
    }

    /// Takes the single producer; `None` if taken before.
    pub fn writer(self: &Arc<Self>) -> Option<TxWriter> {
        if self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(TxWriter { ring: Arc::clone(self), message_seq: [0; TX_MAX_OUTPUTS] })
    }

    /// Waits up to `timeout` for the head to pass `seen` (a host producer
    /// wakes the sender at once; a device one does not, so there `timeout`
    /// is the polling interval).
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> bool {
        self.wake.wait(timeout, || self.head() > seen)
    }

    /// The whole message of sequence `seq`, if the slot holds it: its slot
    /// header's fields and the datagram's bytes (valid until
    /// [`TxRing::release`] passes `seq`).
    pub fn message(&self, seq: u64) -> Option<TxMessage> {
        let h = self.slot_header(seq);
        if h.seq.load(Ordering::Acquire) != seq {
            return None;
        }
        let len = (h.len as usize).min(self.max_datagram);
        // SAFETY: the datagram area of the slot holds `max_datagram` bytes.
        let ptr = unsafe { self.slot(seq).add(TX_DATAGRAM_OFFSET) };
        Some(TxMessage { seq, ptr, len, ready_ns: h.ready_ns, output: h.output, stream_id: h.stream_id })
    }

    /// The sender is done with every message up to `seq`.
    pub fn release(&self, seq: u64) {
        self.header().consumed_seq.store(seq, Ordering::Release);
    }
}

/// One message as the sender sees it in its slot.
#[derive(Debug, Clone, Copy)]
pub struct TxMessage {
    pub seq: u64,
    /// Start of the datagram in the slot. Invariant: `len` readable bytes
    /// that stay unchanged until the ring is released past `seq`.
    ptr: *const u8,
    pub len: usize,
    pub ready_ns: u64,
    pub output: u32,
    pub stream_id: u32,
}

impl TxMessage {
    /// The datagram's address and length, for an `iovec`.
    pub fn datagram_ptr(&self) -> *const u8 {
        self.ptr
    }

    /// The datagram's bytes. Valid while the ring is not released past this message.
    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the invariant on `ptr`; the slot is the sender's until release.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// The single producer of a [`TxRing`] on the host (the host loop's former).
pub struct TxWriter {
    ring: Arc<TxRing>,
    /// Messages formed so far per output (the next message's sequence - 1).
    message_seq: [u64; TX_MAX_OUTPUTS],
}

impl TxWriter {
    pub fn ring(&self) -> &Arc<TxRing> {
        &self.ring
    }

    /// Forms the message of `output` for `input` in `shape` into the next
    /// slot and publishes it; returns false (and counts it dropped) when the
    /// ring is full or the message does not fit a slot. Never waits.
    pub fn offer(
        &mut self,
        shape: MessageShape,
        input: MessageInput<'_>,
        stream_id: u32,
        ready_ns: u64,
    ) -> bool {
        let output = input.output as usize;
        let ring = &*self.ring;
        let header = ring.header();
        let Some(counter) = self.message_seq.get_mut(output) else { return false };
        *counter += 1;
        let input = MessageInput { message_seq: *counter, ..input };
        let seq = header.head_seq.load(Ordering::Relaxed) + 1;
        if seq - header.consumed_seq.load(Ordering::Acquire) > ring.slot_count as u64 {
            header.dropped[output].fetch_add(1, Ordering::Relaxed);
            return false;
        }
        let slot = ring.slot(seq);
        // SAFETY: the slot is not the sender's (checked against consumed
        // above, acquire: its reads are done); this handle is the only
        // producer; the datagram area holds `max_datagram` bytes.
        let datagram =
            unsafe { std::slice::from_raw_parts_mut(slot.add(TX_DATAGRAM_OFFSET), ring.max_datagram) };
        let Some(len) = form(shape, &input, datagram) else {
            header.dropped[output].fetch_add(1, Ordering::Relaxed);
            return false;
        };
        // SAFETY: as above; the non-atomic fields of the slot header are
        // read by the sender only after the release of `seq` below.
        unsafe {
            let h = slot as *mut TxSlotHeader;
            (*h).ready_ns = ready_ns;
            (*h).len = len as u32;
            (*h).output = output as u32;
            (*h).stream_id = stream_id;
        }
        ring.slot_header(seq).seq.store(seq, Ordering::Release);
        header.head_seq.store(seq, Ordering::Release);
        ring.wake.wake();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::ResultRecord;
    use crate::wire::actuation::{PART_RECORD, decode};

    fn offer(w: &mut TxWriter, output: u16, frame: u64) -> bool {
        let r = ResultRecord { frame_seq: frame, stream_id: 4, ..Default::default() };
        let input =
            MessageInput { output, message_seq: 0, flags: 0, record: &r, user: &[0; 12], samples: &[] };
        w.offer(MessageShape { parts: PART_RECORD, samples: 0 }, input, 4, frame * 10)
    }

    #[test]
    fn messages_are_read_in_order_and_a_full_ring_drops_per_output() {
        let ring = TxRing::host(3, 512).unwrap();
        let mut w = ring.writer().unwrap();
        assert!(ring.writer().is_none(), "one producer");
        assert!(offer(&mut w, 0, 1) && offer(&mut w, 1, 2) && offer(&mut w, 0, 3));
        assert!(!offer(&mut w, 1, 4), "three slots, none released");
        assert_eq!((ring.dropped(0), ring.dropped(1)), (0, 1));
        let m = ring.message(2).unwrap();
        assert_eq!((m.output, m.stream_id, m.ready_ns), (1, 4, 20));
        let d = decode(m.bytes()).unwrap();
        assert_eq!((d.header.frame_seq, d.header.message_seq), (2, 1));
        ring.release(1);
        assert!(offer(&mut w, 0, 5), "one slot free again");
        let m = ring.message(4).unwrap();
        let d = decode(m.bytes()).unwrap();
        assert_eq!((d.header.frame_seq, d.header.message_seq), (5, 3), "output 0's third message");
        assert!(ring.message(1).is_none(), "slot 1 now holds sequence 4");
        assert_eq!(ring.head(), 4);
    }

    #[test]
    fn a_message_larger_than_a_slot_is_dropped_not_written_past_it() {
        let ring = TxRing::host(2, 100).unwrap();
        let mut w = ring.writer().unwrap();
        assert!(!offer(&mut w, 2, 1), "64 + 192 bytes do not fit 100");
        assert_eq!((ring.dropped(2), ring.head()), (1, 0));
        assert!(TxRing::host(1, 100).is_err());
    }
}
