//! The hand-off between a receiving thread and an assembly thread
//! (`ingest.assembly_thread`): a fixed pool of receive batches that the
//! thread reading the socket fills and the thread assembling frames empties,
//! passed back and forth through two bounded channels, in order.
//!
//! The reading side takes a free batch, lets the kernel fill it and hands it
//! over with what it read; the assembling side takes filled batches in the
//! order they were read and gives each back once its datagrams are in the
//! frame ring. Neither side allocates after [`pool`]. Dropping one side ends
//! the other's waits ([`Next::Closed`], [`AssemblyGone`]), so neither thread
//! can wait for ever on a peer that is gone.
//!
//! The reading side also says up to when it has read the socket dry
//! ([`ReadingSide::mark_drained`]): a frame may go stale by the clock only up
//! to that time, since datagrams that arrived later may still wait in the
//! socket while the reading thread is away.

use super::batch::RecvBatch;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::time::{Duration, Instant};

/// Receive buffers in one hand-off batch at most: a batch is handed over
/// after every `recvmmsg` call that filled any of it, so under load it holds
/// what one call found waiting, and a small batch keeps more of the pool free.
pub(super) const HANDOFF_BATCH_BUFFERS: usize = 16;

/// Batches in the pool: with [`HANDOFF_BATCH_BUFFERS`] buffers of 64 KiB
/// each, up to 4 MiB of datagrams between the two threads. Few, so that
/// the buffers the kernel fills next were used a moment ago and are still
/// in the caches; a longer stall of the assembly thread is absorbed by the
/// socket's receive buffer (`ingest.recv_buffer_bytes`) while the reading
/// thread waits (`assembly_waits`).
pub(super) const HANDOFF_BATCHES: usize = 4;

/// A batch the kernel filled, on its way to the assembly thread.
pub(super) struct Filled {
    /// Boxed, so that what goes through the channels is a pointer.
    pub(super) batch: Box<RecvBatch>,
    /// Messages filled, from the first.
    pub(super) count: usize,
    /// The clock when `recvmmsg` returned them.
    pub(super) batch_ns: u64,
}

/// The socket thread's end: free batches in, filled batches out.
pub(super) struct ReadingSide {
    free: Receiver<Box<RecvBatch>>,
    filled: SyncSender<Filled>,
    drained_at: Arc<AtomicU64>,
}

/// The assembly thread's end: filled batches in, emptied batches back.
pub(super) struct AssemblingSide {
    filled: Receiver<Filled>,
    free: SyncSender<Box<RecvBatch>>,
    drained_at: Arc<AtomicU64>,
}

/// The assembly thread stopped: nothing will be given back or taken.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct AssemblyGone;

/// What [`AssemblingSide::next`] found.
pub(super) enum Next {
    /// The oldest batch not yet assembled.
    Filled(Filled),
    /// Nothing came within the wait.
    Idle,
    /// The reading side is gone and every batch it handed over was taken.
    Closed,
}

/// A pool of `batches` receive batches of `buffers` buffers each, all free.
pub(super) fn pool(batches: usize, buffers: usize) -> (ReadingSide, AssemblingSide) {
    let batches = batches.max(1);
    let (free_tx, free_rx) = sync_channel(batches);
    let (filled_tx, filled_rx) = sync_channel(batches);
    for _ in 0..batches {
        // Cannot fail: the channel has room for every batch and its
        // receiver is alive.
        let _ = free_tx.send(Box::new(RecvBatch::new(buffers)));
    }
    let drained_at = Arc::new(AtomicU64::new(0));
    (
        ReadingSide { free: free_rx, filled: filled_tx, drained_at: Arc::clone(&drained_at) },
        AssemblingSide { filled: filled_rx, free: free_tx, drained_at },
    )
}

impl ReadingSide {
    /// A free batch if one is back now, else one given back within `wait`
    /// (`Ok(None)` when none was).
    pub(super) fn free_batch(&self, wait: Duration) -> Result<Option<Box<RecvBatch>>, AssemblyGone> {
        match self.free.try_recv() {
            Ok(batch) => Ok(Some(batch)),
            Err(TryRecvError::Disconnected) => Err(AssemblyGone),
            Err(TryRecvError::Empty) => match self.free.recv_timeout(wait) {
                Ok(batch) => Ok(Some(batch)),
                Err(RecvTimeoutError::Timeout) => Ok(None),
                Err(RecvTimeoutError::Disconnected) => Err(AssemblyGone),
            },
        }
    }

    /// Hands a filled batch to the assembly thread. Never blocks: the pool
    /// holds no more batches than the channel has room for.
    pub(super) fn hand_over(&self, filled: Filled) -> Result<(), AssemblyGone> {
        self.filled.try_send(filled).map_err(|_| AssemblyGone)
    }

    /// Every datagram that arrived before `at_ns` (CLOCK_REALTIME) has been
    /// handed over: a read that started then found the socket empty.
    pub(super) fn mark_drained(&self, at_ns: u64) {
        self.drained_at.fetch_max(at_ns, Ordering::Release);
    }
}

impl AssemblingSide {
    /// The next filled batch: taken at once if one waits; otherwise polled
    /// for for up to `spin` (no system call, so a batch handed over then is
    /// taken without a wake-up), then waited for until `wait` has passed.
    pub(super) fn next(&self, spin: Duration, wait: Duration) -> Next {
        match self.filled.try_recv() {
            Ok(filled) => return Next::Filled(filled),
            Err(TryRecvError::Disconnected) => return Next::Closed,
            Err(TryRecvError::Empty) => {}
        }
        if !spin.is_zero() {
            let start = Instant::now();
            while start.elapsed() < spin {
                match self.filled.try_recv() {
                    Ok(filled) => return Next::Filled(filled),
                    Err(TryRecvError::Disconnected) => return Next::Closed,
                    Err(TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
        }
        match self.filled.recv_timeout(wait) {
            Ok(filled) => Next::Filled(filled),
            Err(RecvTimeoutError::Timeout) => Next::Idle,
            Err(RecvTimeoutError::Disconnected) => Next::Closed,
        }
    }

    /// The next filled batch if one waits now, without waiting.
    pub(super) fn next_waiting(&self) -> Option<Filled> {
        self.filled.try_recv().ok()
    }

    /// The latest [`ReadingSide::mark_drained`] time (0 before the first).
    /// Read it before taking what waits ([`AssemblingSide::next_waiting`]
    /// until `None`): every batch holding datagrams from before it is then
    /// taken, so frames may go stale by it.
    pub(super) fn drained_at(&self) -> u64 {
        self.drained_at.load(Ordering::Acquire)
    }

    /// Gives an emptied batch back to the reading side (dropped if it is gone).
    pub(super) fn give_back(&self, batch: Box<RecvBatch>) {
        let _ = self.free.try_send(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(batch: Box<RecvBatch>, count: usize) -> Filled {
        Filled { batch, count, batch_ns: count as u64 }
    }

    #[test]
    fn batches_arrive_in_the_order_handed_over_and_circulate() {
        let (reading, assembling) = pool(3, 2);
        let wait = Duration::from_millis(1);
        let batches: Vec<_> =
            (0..3).map(|_| reading.free_batch(wait).unwrap().expect("a free batch")).collect();
        assert!(reading.free_batch(wait).unwrap().is_none(), "the pool holds three");
        for (i, b) in batches.into_iter().enumerate() {
            assert_eq!(b.buffers(), 2);
            reading.hand_over(filled(b, i)).unwrap();
        }
        for want in 0..3 {
            let Next::Filled(f) = assembling.next(Duration::ZERO, wait) else { panic!("batch {want} waits") };
            assert_eq!(f.count, want, "first handed over, first taken");
            assembling.give_back(f.batch);
        }
        assert!(matches!(assembling.next(Duration::from_micros(50), wait), Next::Idle));
        assert!(reading.free_batch(wait).unwrap().is_some(), "given back batches are free again");
    }

    #[test]
    fn each_side_sees_the_other_go() {
        let (reading, assembling) = pool(2, 1);
        let b = reading.free_batch(Duration::ZERO).unwrap().unwrap();
        reading.hand_over(filled(b, 1)).unwrap();
        drop(reading);
        assert!(
            matches!(assembling.next(Duration::ZERO, Duration::ZERO), Next::Filled(_)),
            "handed over first"
        );
        assert!(matches!(assembling.next(Duration::ZERO, Duration::from_secs(5)), Next::Closed));

        let (reading, assembling) = pool(1, 1);
        let b = reading.free_batch(Duration::ZERO).unwrap().unwrap();
        drop(assembling);
        assert_eq!(reading.hand_over(filled(b, 1)).unwrap_err(), AssemblyGone);
        assert!(
            matches!(reading.free_batch(Duration::from_secs(5)), Err(AssemblyGone)),
            "no wait on a side that is gone"
        );
    }

    #[test]
    fn the_drained_time_only_moves_forward() {
        let (reading, assembling) = pool(1, 1);
        assert_eq!(assembling.drained_at(), 0);
        reading.mark_drained(50);
        reading.mark_drained(40);
        assert_eq!(assembling.drained_at(), 50, "a clock stepped back does not take it back");
        reading.mark_drained(60);
        assert_eq!(assembling.drained_at(), 60);
    }
}
