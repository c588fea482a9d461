//! The result ring: one [`ResultRecord`] per processed frame, written by the
//! consumer (host loop or GPU) and read by the host result thread.
//!
//! The producer writes the record, then stores `head_seq` with release. It
//! never waits for the reader: if the reader falls more than `capacity`
//! results behind, the overwritten results are counted as lost, never read torn.

use super::layout::*;
use super::memory::RingMemory;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Result ring over some [`RingMemory`].
pub struct ResultRing {
    /// Invariant: `mem.len() >= result_ring_bytes(capacity)`, header initialised.
    mem: Box<dyn RingMemory>,
    capacity: usize,
}

impl ResultRing {
    /// Lays a result ring out in zeroed `mem`.
    ///
    /// # Panics
    /// If `mem` is smaller than `result_ring_bytes(capacity)` or `capacity` is 0.
    pub fn new(mem: Box<dyn RingMemory>, capacity: usize) -> Arc<Self> {
        assert!(capacity > 0 && capacity <= u32::MAX as usize);
        assert!(mem.len() >= result_ring_bytes(capacity), "result ring memory too small");
        assert!((mem.as_ptr() as usize).is_multiple_of(64));
        // SAFETY: size and alignment checked above; no other reference exists yet.
        unsafe {
            let h = mem.as_ptr() as *mut ResultRingHeader;
            (*h).magic = RESULT_MAGIC;
            (*h).capacity = capacity as u32;
        }
        Arc::new(Self { mem, capacity })
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn memory(&self) -> &dyn RingMemory {
        &*self.mem
    }

    fn header(&self) -> &ResultRingHeader {
        // SAFETY: initialised in `new`; mutable fields are atomics.
        unsafe { &*(self.mem.as_ptr() as *const ResultRingHeader) }
    }

    /// Newest written result sequence.
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    fn record_ptr(&self, seq: u64) -> *mut ResultRecord {
        let index = ((seq - 1) % self.capacity as u64) as usize;
        // SAFETY: index < capacity, inside the allocation.
        unsafe { self.mem.as_ptr().add(RESULTS_OFFSET).cast::<ResultRecord>().add(index) }
    }

    /// Appends a record (host producer). The record's `result_seq` is set here.
    /// Only one thread may push.
    pub fn push(&self, record: &ResultRecord) -> u64 {
        let seq = self.head() + 1;
        let mut r = *record;
        r.result_seq = seq;
        // SAFETY: single producer; the reader detects overwrites by re-checking
        // the head after copying (see `drain`).
        unsafe { std::ptr::write_volatile(self.record_ptr(seq), r) };
        self.header().head_seq.store(seq, Ordering::Release);
        seq
    }
}

/// Reader of a [`ResultRing`] that remembers where it stopped.
pub struct ResultReader {
    ring: Arc<ResultRing>,
    next: u64,
    lost: u64,
}

impl ResultReader {
    pub fn new(ring: Arc<ResultRing>) -> Self {
        let next = ring.head() + 1;
        Self { ring, next, lost: 0 }
    }

    /// Results overwritten before they were read.
    pub fn lost(&self) -> u64 {
        self.lost
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
            // SAFETY: the record was written before `head` was released; a
            // concurrent overwrite is detected below and the copy discarded.
            let r = unsafe { std::ptr::read_volatile(self.ring.record_ptr(seq)) };
            std::sync::atomic::fence(Ordering::Acquire);
            let now = self.ring.head();
            if now >= seq + cap || r.result_seq != seq {
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

    #[test]
    fn drains_in_order_and_counts_lapped_results() {
        let mem = HostMemory::new(result_ring_bytes(4)).unwrap();
        let ring = ResultRing::new(Box::new(mem), 4);
        let mut rd = ResultReader::new(Arc::clone(&ring));
        for i in 1..=3u64 {
            ring.push(&ResultRecord { ring_seq: i, ..Default::default() });
        }
        let mut out = Vec::new();
        assert_eq!(rd.drain(&mut out), 3);
        assert_eq!(out.iter().map(|r| r.ring_seq).collect::<Vec<_>>(), vec![1, 2, 3]);
        for i in 4..=13u64 {
            ring.push(&ResultRecord { ring_seq: i, ..Default::default() });
        }
        out.clear();
        assert_eq!(rd.drain(&mut out), 4);
        assert_eq!(rd.lost(), 6);
        assert_eq!(out.first().unwrap().ring_seq, 10);
    }
}
