//! The hand-off between the threads reading a stream's sockets and the
//! thread assembling its frames (`ingest.assembly_thread`): each reading
//! thread has a fixed pool of receive batches that it fills and the
//! assembly thread empties; filled batches of every reader go through one
//! bounded channel (tagged with their reader), emptied ones back through
//! each reader's own.
//!
//! A reading side takes a free batch, lets the kernel fill it and hands it
//! over with what it read; the assembling side takes filled batches in the
//! order each reader read them and gives each back once its datagrams are
//! in the frame ring. Neither side allocates after [`pool`]. Dropping one
//! side ends the other's waits ([`Next::Closed`] once every reader is
//! gone, [`AssemblyGone`]), so no thread can wait for ever on a peer that
//! is gone.
//!
//! Each reading side also says what the assembler needs in order to put
//! several readers' datagrams back in arrival order and to age frames:
//! up to when it has read its socket dry ([`ReadingSide::mark_drained`]),
//! and whether it is parked, waiting for its socket with nothing read and
//! not handed over ([`ReadingSide::park`], [`AssemblingSide::parked`]).

use super::batch::RecvBatch;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TryRecvError, sync_channel};
use std::time::{Duration, Instant};

/// Receive buffers in one hand-off batch at most: a batch is handed over
/// after every `recvmmsg` call that filled any of it, so under load it holds
/// what one call found waiting, and a small batch keeps more of the pool free.
pub(super) const HANDOFF_BATCH_BUFFERS: usize = 16;

/// Batches in each reader's pool: with [`HANDOFF_BATCH_BUFFERS`] buffers of
/// 64 KiB each, up to 4 MiB of datagrams between a reading thread and the
/// assembly thread. Few, so that the buffers the kernel fills next were
/// used a moment ago and are still in the caches; a longer stall of the
/// assembly thread is absorbed by the socket's receive buffer
/// (`ingest.recv_buffer_bytes`) while the reading thread waits
/// (`assembly_waits`).
pub(super) const HANDOFF_BATCHES: usize = 4;

/// A batch the kernel filled, on its way to the assembly thread.
pub(super) struct Filled {
    /// Boxed, so that what goes through the channels is a pointer.
    pub(super) batch: Box<RecvBatch>,
    /// Messages filled, from the first.
    pub(super) count: usize,
    /// The clock when `recvmmsg` returned them.
    pub(super) batch_ns: u64,
    /// The reading side that filled it (its index in [`pool`]'s list).
    pub(super) reader: usize,
}

/// What one reading side tells the assembling side besides its batches.
#[derive(Default)]
struct ReaderState {
    /// [`ReadingSide::mark_drained`]'s latest time.
    drained_at: AtomicU64,
    /// Even while the reader is parked ([`ReadingSide::park`]), odd while
    /// it reads; counts every change, so a check that sees the same even
    /// value before and after knows the reader read nothing in between.
    turns: AtomicU64,
    /// The reading side was dropped: nothing more will come from it.
    gone: AtomicBool,
}

/// A reading thread's end: free batches in, filled batches out.
pub(super) struct ReadingSide {
    index: usize,
    free: Receiver<Box<RecvBatch>>,
    filled: SyncSender<Filled>,
    state: Arc<ReaderState>,
}

/// The assembly thread's end: filled batches of every reader in, emptied
/// batches back to the reader that filled each.
pub(super) struct AssemblingSide {
    filled: Receiver<Filled>,
    free: Vec<SyncSender<Box<RecvBatch>>>,
    readers: Vec<Arc<ReaderState>>,
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
    /// Every reading side is gone and every batch handed over was taken.
    Closed,
}

/// For `readers` reading threads, pools of `batches` receive batches of
/// `buffers` buffers each, all free; the reading sides in reader order.
pub(super) fn pool(readers: usize, batches: usize, buffers: usize) -> (Vec<ReadingSide>, AssemblingSide) {
    let (readers, batches) = (readers.max(1), batches.max(1));
    let (filled_tx, filled_rx) = sync_channel(readers * batches);
    let mut reading = Vec::with_capacity(readers);
    let mut assembling = AssemblingSide { filled: filled_rx, free: Vec::new(), readers: Vec::new() };
    for index in 0..readers {
        let (free_tx, free_rx) = sync_channel(batches);
        for _ in 0..batches {
            // Cannot fail: the channel has room for every batch and its
            // receiver is alive.
            let _ = free_tx.send(Box::new(RecvBatch::new(buffers)));
        }
        let state = Arc::new(ReaderState::default());
        assembling.free.push(free_tx);
        assembling.readers.push(Arc::clone(&state));
        reading.push(ReadingSide { index, free: free_rx, filled: filled_tx.clone(), state });
    }
    (reading, assembling)
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

    /// Hands a batch this side filled to the assembly thread. Never
    /// blocks: the channel has room for every reader's whole pool.
    pub(super) fn hand_over(
        &self,
        batch: Box<RecvBatch>,
        count: usize,
        batch_ns: u64,
    ) -> Result<(), AssemblyGone> {
        let filled = Filled { batch, count, batch_ns, reader: self.index };
        self.filled.try_send(filled).map_err(|_| AssemblyGone)
    }

    /// Every datagram that arrived before `at_ns` (CLOCK_REALTIME) has been
    /// handed over: a read that started then found the socket empty.
    pub(super) fn mark_drained(&self, at_ns: u64) {
        self.state.drained_at.fetch_max(at_ns, Ordering::Release);
    }

    /// The reader is about to wait for its socket: everything it read has
    /// been handed over, and it reads nothing until [`ReadingSide::unpark`].
    pub(super) fn park(&self) {
        let turns = self.state.turns.load(Ordering::Relaxed);
        if !turns.is_multiple_of(2) {
            self.state.turns.store(turns + 1, Ordering::SeqCst);
        }
    }

    /// The reader is back from waiting and may read its socket.
    pub(super) fn unpark(&self) {
        let turns = self.state.turns.load(Ordering::Relaxed);
        if turns.is_multiple_of(2) {
            self.state.turns.store(turns + 1, Ordering::SeqCst);
        }
    }
}

impl Drop for ReadingSide {
    fn drop(&mut self) {
        self.state.gone.store(true, Ordering::Release);
    }
}

/// A reader seen parked by [`AssemblingSide::parked`]: still parked (and
/// so having read nothing meanwhile) if [`AssemblingSide::still_parked`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Parked(u64);

impl AssemblingSide {
    /// Reading sides the pool was made for.
    pub(super) fn readers(&self) -> usize {
        self.readers.len()
    }

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

    /// Reader `reader`'s latest [`ReadingSide::mark_drained`] time (0
    /// before the first). Read it before taking what waits
    /// ([`AssemblingSide::next_waiting`] until `None`): every batch of that
    /// reader holding datagrams from before it is then taken.
    pub(super) fn drained_at(&self, reader: usize) -> u64 {
        self.readers[reader].drained_at.load(Ordering::Acquire)
    }

    /// Whether reader `reader` is parked now ([`ReadingSide::park`]); its
    /// batches handed over before it parked can be taken once this returns.
    pub(super) fn parked(&self, reader: usize) -> Option<Parked> {
        let turns = self.readers[reader].turns.load(Ordering::SeqCst);
        turns.is_multiple_of(2).then_some(Parked(turns))
    }

    /// Whether reader `reader` stayed parked since `seen`, reading nothing.
    pub(super) fn still_parked(&self, reader: usize, seen: Parked) -> bool {
        self.readers[reader].turns.load(Ordering::SeqCst) == seen.0
    }

    /// Whether reader `reader`'s side was dropped (nothing more comes from it).
    pub(super) fn gone(&self, reader: usize) -> bool {
        self.readers[reader].gone.load(Ordering::Acquire)
    }

    /// Gives an emptied batch back to the reader that filled it (dropped if
    /// that reader is gone).
    pub(super) fn give_back(&self, reader: usize, batch: Box<RecvBatch>) {
        let _ = self.free[reader].try_send(batch);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(batches: usize, buffers: usize) -> (ReadingSide, AssemblingSide) {
        let (mut reading, assembling) = pool(1, batches, buffers);
        (reading.pop().unwrap(), assembling)
    }

    #[test]
    fn batches_arrive_in_the_order_handed_over_and_circulate() {
        let (reading, assembling) = one(3, 2);
        let wait = Duration::from_millis(1);
        let batches: Vec<_> =
            (0..3).map(|_| reading.free_batch(wait).unwrap().expect("a free batch")).collect();
        assert!(reading.free_batch(wait).unwrap().is_none(), "the pool holds three");
        for (i, b) in batches.into_iter().enumerate() {
            assert_eq!(b.buffers(), 2);
            reading.hand_over(b, i, 0).unwrap();
        }
        for want in 0..3 {
            let Next::Filled(f) = assembling.next(Duration::ZERO, wait) else { panic!("batch {want} waits") };
            assert_eq!((f.count, f.reader), (want, 0), "first handed over, first taken");
            assembling.give_back(f.reader, f.batch);
        }
        assert!(matches!(assembling.next(Duration::from_micros(50), wait), Next::Idle));
        assert!(reading.free_batch(wait).unwrap().is_some(), "given back batches are free again");
    }

    #[test]
    fn each_reader_has_its_own_pool_and_its_batches_come_back_to_it() {
        let (reading, assembling) = pool(2, 1, 1);
        assert_eq!(assembling.readers(), 2);
        let wait = Duration::from_millis(1);
        let (a, b) =
            (reading[0].free_batch(wait).unwrap().unwrap(), reading[1].free_batch(wait).unwrap().unwrap());
        assert!(reading[0].free_batch(wait).unwrap().is_none(), "reader 0 has used its one batch");
        reading[1].hand_over(b, 7, 0).unwrap();
        reading[0].hand_over(a, 3, 0).unwrap();
        let Next::Filled(first) = assembling.next(Duration::ZERO, wait) else { panic!("reader 1's batch") };
        assert_eq!((first.reader, first.count), (1, 7));
        assembling.give_back(first.reader, first.batch);
        assert!(reading[0].free_batch(wait).unwrap().is_none(), "reader 1's batch went back to reader 1");
        assert!(reading[1].free_batch(wait).unwrap().is_some());
        let Next::Filled(second) = assembling.next(Duration::ZERO, wait) else { panic!("reader 0's batch") };
        assert_eq!((second.reader, second.count), (0, 3));
    }

    #[test]
    fn each_side_sees_the_other_go() {
        let (reading, assembling) = one(2, 1);
        let b = reading.free_batch(Duration::ZERO).unwrap().unwrap();
        reading.hand_over(b, 1, 0).unwrap();
        assert!(!assembling.gone(0));
        drop(reading);
        assert!(assembling.gone(0));
        assert!(
            matches!(assembling.next(Duration::ZERO, Duration::ZERO), Next::Filled(_)),
            "handed over first"
        );
        assert!(matches!(assembling.next(Duration::ZERO, Duration::from_secs(5)), Next::Closed));

        let (mut reading, assembling) = pool(2, 1, 1);
        drop(reading.pop());
        assert!(
            matches!(assembling.next(Duration::ZERO, Duration::ZERO), Next::Idle),
            "not closed while one reader is left"
        );
        drop(reading);
        assert!(matches!(assembling.next(Duration::ZERO, Duration::from_secs(5)), Next::Closed));

        let (reading, assembling) = one(1, 1);
        let b = reading.free_batch(Duration::ZERO).unwrap().unwrap();
        drop(assembling);
        assert_eq!(reading.hand_over(b, 1, 0).unwrap_err(), AssemblyGone);
        assert!(
            matches!(reading.free_batch(Duration::from_secs(5)), Err(AssemblyGone)),
            "no wait on a side that is gone"
        );
    }

    #[test]
    fn the_drained_time_only_moves_forward() {
        let (reading, assembling) = one(1, 1);
        assert_eq!(assembling.drained_at(0), 0);
        reading.mark_drained(50);
        reading.mark_drained(40);
        assert_eq!(assembling.drained_at(0), 50, "a clock stepped back does not take it back");
        reading.mark_drained(60);
        assert_eq!(assembling.drained_at(0), 60);
    }

    #[test]
    fn a_reader_that_read_since_it_was_seen_parked_is_not_still_parked() {
        let (reading, assembling) = one(1, 1);
        let seen = assembling.parked(0).expect("a reader that has not read yet is parked");
        assert!(assembling.still_parked(0, seen));
        reading.unpark();
        reading.unpark();
        assert!(assembling.parked(0).is_none(), "reading");
        assert!(!assembling.still_parked(0, seen));
        reading.park();
        reading.park();
        let again = assembling.parked(0).expect("parked again");
        assert_ne!(again, seen, "a read and a park in between are told apart");
        assert!(!assembling.still_parked(0, seen) && assembling.still_parked(0, again));
    }
}
