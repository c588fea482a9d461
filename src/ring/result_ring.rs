//! The result ring: one [`ResultRecord`] per processed frame, written by its
//! single producer (the host loop through a [`ResultWriter`], or the GPU
//! handler) and read by the host result thread.
//!
//! Protocol. The ring has [`result_slots`]`(capacity)` record slots: one
//! more than the `capacity` results a reader may fall behind. The producer
//! of sequence `s` first orders every earlier store before its record
//! stores (a release fence), writes the record into slot `(s - 1) % slots`
//! (in several stores, in no particular order), then stores `head_seq = s`
//! with release. It never waits for the reader.
//!
//! The reader copies the record of sequence `s` and then, after an acquire
//! fence, reads the head again (`head_after`). The slot of `s` is rewritten
//! for `s + slots`, whose stores start only after the release of
//! `head = s + slots - 1 = s + capacity` (the fence above); so if
//! `head_after < s + capacity` no store of the rewrite can have been seen
//! and the copy is whole. Otherwise the copy is dropped and counted lost.
//! Results overwritten before they are read are counted as lost, never
//! read torn, and `read + lost == written` once the reader caught up.
//!
//! A reader with nothing to read may sleep in [`ResultRing::wait_past`]; a
//! host writer wakes it after each push, so the host loop's results are
//! seen without the reader polling.

use super::frame_ring::RingError;
use super::layout::*;
use super::memory::RingMemory;
use super::reader_wake::ReaderWake;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering, fence};
use std::time::Duration;

/// Result ring over some host-addressable [`RingMemory`].
pub struct ResultRing {
    /// Invariant: host-addressable, 64-byte aligned,
    /// `mem.len() >= result_ring_bytes(capacity)`, header initialised.
    mem: Box<dyn RingMemory>,
    /// Results the reader may fall behind without loss; `1..u32::MAX`.
    capacity: usize,
    /// Record slots: `capacity + 1`.
    slots: usize,
    writer_taken: AtomicBool,
    /// The reader parked in [`ResultRing::wait_past`], if any: a host
    /// writer wakes it on every push. A device producer does not, so there
    /// the reader's timeout is its polling interval.
    wake: ReaderWake,
}

impl ResultRing {
    /// Lays a result ring for `capacity` results out in zeroed `mem`, which
    /// the host must be able to address (the result thread reads it in place).
    pub fn new(mem: Box<dyn RingMemory>, capacity: usize) -> Result<Arc<Self>, RingError> {
        let slots = match result_slots(capacity) {
            Some(slots) if capacity > 0 && slots <= u32::MAX as usize => slots,
            _ => return Err(RingError::BadResultCapacity(capacity)),
        };
        let needed = result_ring_bytes(capacity).ok_or(RingError::BadResultCapacity(capacity))?;
        if !mem.is_host_addressable() || mem.as_ptr().is_null() {
            return Err(RingError::NoHostView(mem.kind()));
        }
        if mem.len() < needed {
            return Err(RingError::TooSmall { needed, available: mem.len() });
        }
        if !(mem.as_ptr() as usize).is_multiple_of(64) {
            return Err(RingError::Misaligned);
        }
        // SAFETY: host-addressable memory of at least `needed` bytes, 64-byte
        // aligned (checked above), that nobody else references yet.
        unsafe {
            let h = mem.as_ptr() as *mut ResultRingHeader;
            (*h).magic = RESULT_MAGIC;
            (*h).capacity = slots as u32;
        }
        Ok(Arc::new(Self {
            mem,
            capacity,
            slots,
            writer_taken: AtomicBool::new(false),
            wake: ReaderWake::default(),
        }))
    }

    /// Results a reader may fall behind without losing any.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Record slots in the memory (`capacity + 1`): what a device producer
    /// indexes with `(seq - 1) % slots`.
    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn memory(&self) -> &dyn RingMemory {
        &*self.mem
    }

    fn header(&self) -> &ResultRingHeader {
        // SAFETY: host-addressable memory initialised in `new`; the fields
        // mutated after that are atomics.
        unsafe { &*(self.mem.as_ptr() as *const ResultRingHeader) }
    }

    /// Newest written result sequence.
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    /// Blocks the calling thread until the head passes `seen` or `timeout`
    /// elapses (or, rarely, spuriously earlier); returns whether the head
    /// passed `seen`. One reader thread at a time. A host [`ResultWriter`]
    /// wakes it on every push; results a device writes are seen only when
    /// the timeout ends the wait, so there `timeout` is the polling interval.
    pub fn wait_past(&self, seen: u64, timeout: Duration) -> bool {
        self.wake.wait(timeout, || self.head() > seen)
    }

    fn record_ptr(&self, seq: u64) -> *mut ResultRecord {
        debug_assert!(seq > 0);
        let index = ((seq - 1) % self.slots as u64) as usize;
        // SAFETY: index < slots, and `new` checked that `slots` records fit
        // after RESULTS_OFFSET.
        unsafe { self.mem.as_ptr().add(RESULTS_OFFSET).cast::<ResultRecord>().add(index) }
    }

    /// Takes the single host writer; `None` if a writer was taken before
    /// (by the host loop, or by the GPU executor that hands the ring to the
    /// device, which keeps it while the device may write).
    pub fn writer(self: &Arc<Self>) -> Option<ResultWriter> {
        if self.writer_taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(ResultWriter { ring: Arc::clone(self) })
    }
}

/// The single producer of a [`ResultRing`]. Whoever holds it is the only
/// writer: the host loop pushes through it; the GPU executor keeps it for as
/// long as the device writes the ring.
pub struct ResultWriter {
    ring: Arc<ResultRing>,
}

impl ResultWriter {
    pub fn ring(&self) -> &Arc<ResultRing> {
        &self.ring
    }

    /// Appends a record; its `result_seq` is set here, and a reader waiting
    /// in [`ResultRing::wait_past`] is woken. Returns that sequence.
    pub fn push(&mut self, record: &ResultRecord) -> u64 {
        let seq = self.ring.head() + 1;
        let mut r = *record;
        r.result_seq = seq;
        // Orders the release of the previous head before the record stores
        // below: a reader that sees any of them also sees that head.
        fence(Ordering::Release);
        // SAFETY: this handle is the ring's only writer (taken once); the
        // slot is inside the allocation; readers detect a concurrent rewrite
        // by re-reading the head after copying (see `ResultReader::drain`).
        unsafe { std::ptr::write_volatile(self.ring.record_ptr(seq), r) };
        self.ring.header().head_seq.store(seq, Ordering::Release);
        self.ring.wake.wake();
        seq
    }
}

/// True when a copy of record `seq`, followed by a head read of
/// `head_after`, may hold stores of the slot's rewrite: that rewrite (for
/// `seq + slots`) starts once the head reaches `seq + slots - 1 == seq + capacity`.
fn may_be_rewritten(seq: u64, head_after: u64, capacity: u64) -> bool {
    head_after >= seq.saturating_add(capacity)
}

/// Reader of a [`ResultRing`] that remembers where it stopped.
pub struct ResultReader {
    ring: Arc<ResultRing>,
    next: u64,
    lost: u64,
}

impl ResultReader {
    pub fn new(ring: Arc<ResultRing>) -> Self {
        let next = ring.head().saturating_add(1);
        Self { ring, next, lost: 0 }
    }

    /// The ring read.
    pub fn ring(&self) -> &Arc<ResultRing> {
        &self.ring
    }

    /// Results overwritten before they were read.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// Sequence of the last result read (or skipped as lost): the ring's
    /// head minus this is the work still waiting for the reader.
    pub fn position(&self) -> u64 {
        self.next.saturating_sub(1)
    }

    /// Copies every new result into `out`; returns how many were appended.
    pub fn drain(&mut self, out: &mut Vec<ResultRecord>) -> usize {
        let head = self.ring.head();
        let cap = self.ring.capacity as u64;
        if head < self.next {
            return 0;
        }
        if head - self.next + 1 > cap {
            let oldest = head - cap + 1;
            self.lost += oldest - self.next;
            self.next = oldest;
        }
        let start = out.len();
        while self.next <= head {
            let seq = self.next;
            // SAFETY: the slot is inside the allocation; the record was
            // written before `head` was released, and a concurrent rewrite is
            // detected below and the copy discarded without being looked at.
            let r = unsafe { std::ptr::read_volatile(self.ring.record_ptr(seq)) };
            fence(Ordering::Acquire);
            if may_be_rewritten(seq, self.ring.head(), cap) || r.result_seq != seq {
                self.lost += 1;
            } else {
                out.push(r);
            }
            self.next += 1;
        }
        out.len() - start
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::HostMemory;

    fn ring_of(capacity: usize) -> Arc<ResultRing> {
        ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(capacity).unwrap()).unwrap()), capacity)
            .unwrap()
    }

    #[test]
    fn a_push_wakes_a_reader_waiting_far_longer() {
        let ring = ring_of(8);
        let mut w = ring.writer().unwrap();
        let reading = Arc::clone(&ring);
        crate::ring::reader_wake::check_a_publication_wakes_the_waiter(
            move |seen, timeout| reading.wait_past(seen, timeout),
            |round| {
                w.push(&ResultRecord { ring_seq: round, ..Default::default() });
            },
        );
    }

    #[test]
    fn waiting_without_a_push_ends_at_the_timeout_and_says_so() {
        let ring = ring_of(4);
        let mut w = ring.writer().unwrap();
        assert!(!ring.wait_past(0, Duration::from_millis(5)));
        w.push(&ResultRecord::default());
        assert!(ring.wait_past(0, Duration::from_secs(60)), "the head is already past 0: no wait");
        assert!(!ring.wait_past(1, Duration::from_millis(5)));
    }

    #[test]
    fn drains_in_order_and_counts_lapped_results() {
        let mem = HostMemory::new(result_ring_bytes(4).unwrap()).unwrap();
        let ring = ResultRing::new(Box::new(mem), 4).unwrap();
        let mut rd = ResultReader::new(Arc::clone(&ring));
        let mut w = ring.writer().unwrap();
        assert!(ring.writer().is_none(), "one writer");
        for i in 1..=3u64 {
            w.push(&ResultRecord { ring_seq: i, ..Default::default() });
        }
        let mut out = Vec::new();
        assert_eq!(rd.drain(&mut out), 3);
        assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        for i in 4..=13u64 {
            w.push(&ResultRecord { ring_seq: i, ..Default::default() });
        }
        out.clear();
        assert_eq!(rd.drain(&mut out), 4);
        assert_eq!(rd.lost(), 6);
        assert_eq!(out.first().unwrap().ring_seq, 10);
    }

    #[test]
    fn memory_without_a_host_view_or_of_a_bad_size_is_an_error_not_a_panic() {
        use crate::ring::memory::FakeDeviceMemory;
        let bytes = result_ring_bytes(4).unwrap();
        let device_only = FakeDeviceMemory::new(bytes, 0x7f00_0000_0000);
        assert!(matches!(
            ResultRing::new(Box::new(device_only), 4),
            Err(RingError::NoHostView("fake-device"))
        ));
        let small = HostMemory::new(result_ring_bytes(4).unwrap()).unwrap();
        let err = ResultRing::new(Box::new(small), 1 << 20).err().unwrap();
        assert!(matches!(err, RingError::TooSmall { .. }), "{err}");
        let mem = || Box::new(HostMemory::new(bytes).unwrap());
        assert!(matches!(ResultRing::new(mem(), 0), Err(RingError::BadResultCapacity(0))));
        let err = ResultRing::new(mem(), usize::MAX).err().unwrap();
        assert!(err.to_string().contains("ring.results"), "{err}");
        assert!(matches!(ResultRing::new(mem(), u32::MAX as usize), Err(RingError::BadResultCapacity(_))));
    }

    #[test]
    fn the_device_sees_one_slot_more_than_the_capacity() {
        let ring =
            ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(4).unwrap()).unwrap()), 4).unwrap();
        assert_eq!((ring.capacity(), ring.slots()), (4, 5));
        // SAFETY: host memory initialised by `new`; read-only look at the header.
        let h = unsafe { &*(ring.memory().as_ptr() as *const ResultRingHeader) };
        assert_eq!((h.magic, h.capacity), (RESULT_MAGIC, 5));
    }

    #[test]
    fn a_copy_is_trusted_only_while_the_head_is_below_one_capacity_past_it() {
        // Capacity 3, 4 slots: slot of 1 is rewritten for 5, which starts
        // once head 4 is released.
        assert!(!may_be_rewritten(1, 1, 3));
        assert!(!may_be_rewritten(1, 3, 3), "head 3: record 4 may be in flight, in another slot");
        assert!(may_be_rewritten(1, 4, 3), "head 4: record 5 may be in flight, in this slot");
        assert!(may_be_rewritten(1, 9, 3));
        assert!(may_be_rewritten(u64::MAX - 1, u64::MAX, 3), "no overflow on a garbage head");
    }
}

#[cfg(test)]
mod protocol_props {
    //! The result protocol under real concurrency: a writer pushing at a
    //! random pace, a reader draining at a random pace; every record read is
    //! whole (all fields derived from its sequence), in order, and
    //! `read + lost == written`.
    use super::*;
    use crate::ring::HostMemory;
    use proptest::prelude::*;
    use std::thread;

    fn record_for(seq: u64) -> ResultRecord {
        ResultRecord {
            ring_seq: seq.wrapping_mul(3),
            frame_seq: seq ^ 0x5555_5555,
            stream_id: seq as u32,
            slot_flags: !(seq as u32),
            sender_ts_ns: seq << 1,
            first_rx_ns: seq << 2,
            last_rx_ns: seq << 3,
            published_ns: seq << 4,
            detect_ns: seq + 7,
            done_ns: seq + 11,
            sum: seq as f32,
            detect_count: (seq as u32).wrapping_mul(5),
            skipped_before: seq.wrapping_mul(13),
            user: [seq as u32; 12],
            ..Default::default()
        }
    }

    fn is_whole(r: &ResultRecord) -> bool {
        *r == ResultRecord { result_seq: r.result_seq, ..record_for(r.result_seq) }
    }

    /// Busy work of `units` small steps: a pace without sleeping.
    fn pause(units: u32) {
        for _ in 0..units {
            std::hint::spin_loop();
        }
    }

    fn run(capacity: usize, written: u64, writer_pace: Vec<u32>, reader_pace: Vec<u32>) {
        let mem = HostMemory::new(result_ring_bytes(capacity).unwrap()).unwrap();
        let ring = ResultRing::new(Box::new(mem), capacity).unwrap();
        let mut w = ring.writer().unwrap();
        let mut rd = ResultReader::new(Arc::clone(&ring));
        let writer = thread::spawn(move || {
            for seq in 1..=written {
                assert_eq!(w.push(&record_for(seq)), seq);
                pause(writer_pace[seq as usize % writer_pace.len()]);
            }
        });
        let mut read = Vec::new();
        let mut batch = Vec::new();
        let mut round = 0usize;
        loop {
            let done = writer.is_finished();
            batch.clear();
            rd.drain(&mut batch);
            for r in &batch {
                assert!(is_whole(r), "torn record {r:?}");
                assert!(read.last().is_none_or(|&last| r.result_seq > last), "out of order");
                read.push(r.result_seq);
            }
            if done {
                break;
            }
            pause(reader_pace[round % reader_pace.len()]);
            round += 1;
        }
        writer.join().unwrap();
        assert_eq!(read.len() as u64 + rd.lost(), written, "read + lost == written");
        assert_eq!(ring.head(), written);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]
        #[test]
        fn reader_sees_only_whole_records_in_order(
            capacity in 1usize..6,
            written in 1u64..20_000,
            writer_pace in proptest::collection::vec(0u32..50, 1..8),
            reader_pace in proptest::collection::vec(0u32..500, 1..8),
        ) {
            run(capacity, written, writer_pace, reader_pace);
        }
    }
}
