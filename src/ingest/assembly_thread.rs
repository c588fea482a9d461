//! The two threads of `ingest.assembly_thread`: the reading thread's side
//! of the receive loop ([`HandingOver`]: read into a free batch of the
//! [`super::handoff`] pool, hand it over, say when the socket was found
//! empty) and the assembly stage ([`AssemblyStage`]: take the batches in
//! the order read, hand their datagrams to the assembler, tick it, flush
//! it at the end). [`super::udp::UdpReceiver::run`] starts both.

use super::allow::AllowList;
use super::assembler::FrameAssembler;
use super::batch::RecvBatch;
use super::counters::IngestCounters;
use super::handoff::{AssemblingSide, Filled, Next, ReadingSide};
use super::tap::DatagramTap;
use super::udp::{BATCHES_PER_WAKE, Drained, IngestError, Readiness, SocketReader, deliver};
use crate::clock;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// The reading thread of `ingest.assembly_thread`: reads into free batches
/// of the pool and hands each filled one over.
pub(super) struct HandingOver<'a> {
    pub(super) fd: RawFd,
    pub(super) readiness: &'a mut Readiness,
    pub(super) side: ReadingSide,
    /// A free batch the last read left empty, kept for the next.
    pub(super) held: Option<Box<RecvBatch>>,
    pub(super) stop: &'a AtomicBool,
    pub(super) counters: &'a IngestCounters,
    /// The assembly thread: once it has ended (it failed to start, or
    /// panicked), reading stops.
    pub(super) assembly: &'a std::thread::ScopedJoinHandle<'a, Result<(), String>>,
}

impl HandingOver<'_> {
    /// A free batch, waiting for the assembly thread to give one back if
    /// none is (counted in `assembly_waits`); `None` when `stop` was set
    /// meanwhile.
    fn free_batch(&mut self) -> Result<Option<Box<RecvBatch>>, IngestError> {
        if let Some(batch) = self.held.take() {
            return Ok(Some(batch));
        }
        let gone = |_| IngestError::AssemblyGone;
        if let Some(batch) = self.side.free_batch(Duration::ZERO).map_err(gone)? {
            return Ok(Some(batch));
        }
        IngestCounters::bump(&self.counters.assembly_waits);
        while !self.stop.load(Ordering::Acquire) {
            if let Some(batch) = self.side.free_batch(self.readiness.timeout).map_err(gone)? {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }
}

impl SocketReader for HandingOver<'_> {
    fn wait_readable(&mut self) -> Result<(), IngestError> {
        self.readiness.wait()
    }

    fn prepare_for_backlog(&mut self) {}

    fn read_available(&mut self) -> Result<Drained, IngestError> {
        if self.assembly.is_finished() {
            return Err(IngestError::AssemblyGone);
        }
        let mut drained = Drained { buffers: 0, empty: false };
        for _ in 0..BATCHES_PER_WAKE {
            let Some(mut batch) = self.free_batch()? else { break };
            let started_ns = clock::realtime_ns();
            let count = batch.recv(self.fd).map_err(IngestError::Recv)?;
            let short = count < batch.buffers();
            if count == 0 {
                self.held = Some(batch);
            } else {
                drained.buffers += count;
                let filled = Filled { batch, count, batch_ns: clock::realtime_ns() };
                self.side.hand_over(filled).map_err(|_| IngestError::AssemblyGone)?;
            }
            if short {
                // After the hand-over, so that the assembly thread finds
                // every datagram from before `started_ns` handed over.
                self.side.mark_drained(started_ns);
                drained.empty = true;
                break;
            }
        }
        Ok(drained)
    }

    fn end_turn(&mut self, _: &Drained, _: u64) {}
}

/// What the assembly thread of `ingest.assembly_thread` shares with the
/// reading thread.
pub(super) struct AssemblyStage<'a> {
    pub(super) allow: &'a AllowList,
    pub(super) counters: &'a IngestCounters,
    pub(super) local: SocketAddr,
}

impl AssemblyStage<'_> {
    /// Assembles every batch handed over, in order, ticking `assembler`
    /// after each run of batches and whenever none came for `idle`; spins
    /// for `spin` before waiting. Flushes once the reading side is gone.
    pub(super) fn run<A: FrameAssembler + ?Sized>(
        &self,
        from: &AssemblingSide,
        assembler: &mut A,
        mut tap: Option<&mut (dyn DatagramTap + 'static)>,
        spin: Duration,
        idle: Duration,
    ) {
        let mut latest_rx_ns = 0;
        loop {
            let first = match from.next(spin, idle) {
                Next::Filled(filled) => Some(filled),
                Next::Idle => None,
                Next::Closed => break,
            };
            // Read before taking what waits: see `AssemblingSide::drained_at`.
            let drained_at = from.drained_at();
            let waiting = std::iter::from_fn(|| from.next_waiting());
            let mut taken = 0;
            // At most BATCHES_PER_WAKE before a tick, so that a reading
            // thread that never lets the queue run dry cannot keep stale
            // frames from being published.
            for filled in first.into_iter().chain(waiting).take(BATCHES_PER_WAKE) {
                taken += 1;
                for i in 0..filled.count {
                    let (buf, info) = filled.batch.message(i, filled.batch_ns);
                    latest_rx_ns = latest_rx_ns.max(info.rx_ns);
                    deliver(assembler, self.counters, self.allow, tap.as_deref_mut(), self.local, buf, info);
                }
                from.give_back(filled.batch);
            }
            // Frames go stale by the clock only up to when the reading
            // thread last found the socket empty (or the latest arrival
            // handled, if later): datagrams that came after may still wait.
            // If batches may still wait here, only by the latest arrival.
            let caught_up = taken < BATCHES_PER_WAKE;
            let stale_at = if caught_up { latest_rx_ns.max(drained_at) } else { latest_rx_ns };
            let now = clock::realtime_ns();
            assembler.on_tick_behind(stale_at.min(now), now);
        }
        assembler.flush(clock::realtime_ns());
    }
}
