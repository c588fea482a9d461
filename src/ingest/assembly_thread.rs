//! The threads of `ingest.assembly_thread`: a reading thread's side of the
//! receive loop ([`HandingOver`]: read into a free batch of its
//! [`super::handoff`] pool, hand it over, say when the socket was found
//! empty and when it parks) and the assembly stage ([`AssemblyStage`]:
//! take the batches in the order read, with `ingest.reading_threads`
//! merge the readers' datagrams back into arrival order, hand them to the
//! assembler, tick it, flush it at the end).
//! [`super::udp::UdpReceiver::run`] starts them.

use super::allow::AllowList;
use super::assembler::FrameAssembler;
use super::batch::{BufferInfo, RecvBatch};
use super::counters::IngestCounters;
use super::deliver::deliver;
use super::error::IngestError;
use super::handoff::{AssemblingSide, Filled, HANDOFF_BATCHES, Next, ReadingSide};
use super::receive_loop::{BATCHES_PER_WAKE, Drained, SocketReader, receive_loop};
use super::socket::Readiness;
use super::steering::{Head, peek_head};
use super::tap::DatagramTap;
use crate::clock;
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// What every thread of a receiver with an assembly thread shares.
#[derive(Clone, Copy)]
pub(super) struct Shared<'a> {
    /// The receiver's stop flag.
    pub(super) stop: &'a AtomicBool,
    /// Set when a thread of the receiver stopped early (a reading thread
    /// on an error; the assembly thread however it ended before the
    /// readers): the reading threads stop too.
    pub(super) halt: &'a AtomicBool,
    pub(super) counters: &'a IngestCounters,
}

/// A reading thread of `ingest.assembly_thread`: reads into free batches
/// of its pool and hands each filled one over.
pub(super) struct HandingOver<'a> {
    fd: RawFd,
    readiness: &'a mut Readiness,
    side: ReadingSide,
    /// A free batch the last read left empty, kept for the next.
    held: Option<Box<RecvBatch>>,
    shared: Shared<'a>,
}

impl<'a> HandingOver<'a> {
    /// The reading thread of socket `fd`, handing over through `side`.
    pub(super) fn new(
        fd: RawFd,
        readiness: &'a mut Readiness,
        side: ReadingSide,
        shared: Shared<'a>,
    ) -> Self {
        Self { fd, readiness, side, held: None, shared }
    }

    /// Runs the receive loop until the stop flag or a failure ends it.
    pub(super) fn run(&mut self, poll_budget: Duration) -> Result<(), IngestError> {
        let Shared { stop, counters, .. } = self.shared;
        receive_loop(self, stop, poll_budget, counters)
    }

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
        IngestCounters::bump(&self.shared.counters.assembly_waits);
        while !self.shared.stop.load(Ordering::Acquire) {
            if let Some(batch) = self.side.free_batch(self.readiness.timeout).map_err(gone)? {
                return Ok(Some(batch));
            }
        }
        Ok(None)
    }
}

impl SocketReader for HandingOver<'_> {
    fn wait_readable(&mut self) -> Result<(), IngestError> {
        // Parked while it waits: the assembly thread may then look at the
        // socket itself to learn that this reader holds nothing.
        self.side.park();
        let waited = self.readiness.wait();
        self.side.unpark();
        waited
    }

    fn prepare_for_backlog(&mut self) {}

    fn read_available(&mut self) -> Result<Drained, IngestError> {
        if self.shared.halt.load(Ordering::Acquire) {
            return Err(IngestError::PeerStopped);
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
                let batch_ns = clock::realtime_ns();
                self.side.hand_over(batch, count, batch_ns).map_err(|_| IngestError::AssemblyGone)?;
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
/// reading threads.
pub(super) struct AssemblyStage<'a> {
    pub(super) allow: &'a AllowList,
    pub(super) counters: &'a IngestCounters,
    pub(super) local: SocketAddr,
    /// Each reading thread's socket, in reader order: with several, a
    /// parked reader's is looked at to learn that it holds nothing older.
    pub(super) sockets: &'a [RawFd],
}

/// One reader's batches taken off the hand-off channel and not yet
/// assembled, in the order it read them.
struct Lane {
    queue: VecDeque<Filled>,
    /// The next message of the front batch.
    next: usize,
    /// That message's kernel facts (its arrival time orders the lanes),
    /// read once for choosing and assembling it; `None` when empty.
    head: Option<BufferInfo>,
    /// Every datagram of this reader that arrived before this time has
    /// been taken off the channel: it is assembled or waits in `queue`.
    through_ns: u64,
}

impl Lane {
    fn new() -> Self {
        Self { queue: VecDeque::with_capacity(HANDOFF_BATCHES), next: 0, head: None, through_ns: 0 }
    }

    /// The time frames may go stale by as far as this reader goes.
    fn known_through(&self) -> u64 {
        self.head.map_or(self.through_ns, |head| head.rx_ns.max(self.through_ns))
    }

    /// The next message's arrival time (`u64::MAX` when empty).
    fn head_rx_ns(&self) -> u64 {
        self.head.map_or(u64::MAX, |head| head.rx_ns)
    }

    fn set_head(&mut self) {
        self.head = self.queue.front().map(|front| front.batch.info(self.next, front.batch_ns));
    }
}

/// Whether the earliest datagram waiting may be assembled now.
enum Turn {
    /// No other reader can hold an earlier one.
    Go,
    /// Batches were taken meanwhile: choose again.
    Again,
    /// A reader that is reading may still hand over an earlier one.
    Wait,
}

impl AssemblyStage<'_> {
    /// Assembles every batch handed over, each reader's in the order it
    /// read them and several readers' merged by arrival time, ticking
    /// `assembler` after each run of batches and whenever none came for
    /// `idle`; spins for `spin` before waiting. Flushes once every reading
    /// side is gone.
    pub(super) fn run<A: FrameAssembler + ?Sized>(
        &self,
        from: &AssemblingSide,
        assembler: &mut A,
        mut tap: Option<&mut (dyn DatagramTap + 'static)>,
        spin: Duration,
        idle: Duration,
    ) {
        let readers = from.readers();
        let mut lanes: Vec<Lane> = (0..readers).map(|_| Lane::new()).collect();
        let mut marks = vec![0; readers];
        loop {
            // Read before taking what waits: see `AssemblingSide::drained_at`.
            for (r, mark) in marks.iter_mut().enumerate() {
                *mark = from.drained_at(r);
            }
            let pending = lanes.iter().any(|l| !l.queue.is_empty());
            let first = match from.next(
                if pending { Duration::ZERO } else { spin },
                if pending { Duration::ZERO } else { idle },
            ) {
                Next::Filled(filled) => Some(filled),
                Next::Idle => None,
                Next::Closed if !pending => break,
                Next::Closed => None,
            };
            for filled in first.into_iter().chain(std::iter::from_fn(|| from.next_waiting())) {
                take(&mut lanes, filled);
            }
            for (lane, &mark) in lanes.iter_mut().zip(&marks) {
                lane.through_ns = lane.through_ns.max(mark);
            }
            self.assemble(from, &mut lanes, assembler, &mut tap);
            // Frames go stale by the clock only up to when every reader
            // is known to have handed over what arrived before: the time
            // it last found its socket empty, or the latest arrival
            // assembled from it, if later (datagrams that came after may
            // still wait in its socket).
            let stale_at = lanes
                .iter()
                .enumerate()
                .filter(|(r, lane)| !(lane.queue.is_empty() && from.gone(*r)))
                .map(|(_, lane)| lane.known_through())
                .min();
            let now = clock::realtime_ns();
            if let Some(stale_at) = stale_at {
                assembler.on_tick_behind(stale_at.min(now), now);
            }
        }
        assembler.flush(clock::realtime_ns());
    }

    /// Assembles what the lanes hold, earliest arrival first, until they
    /// are empty or [`BATCHES_PER_WAKE`] batches were finished (so that
    /// frames are ticked while readers keep the lanes full). A datagram
    /// waits while a reader with nothing taken is reading and may hand
    /// over an earlier one, however long that takes: such a reader has
    /// all its batches free and never waits for this thread, so it
    /// either hands over, finds its socket empty, parks or is gone. (Going
    /// on without a reader that was kept off its core would publish its
    /// frames out of order, and frames more than `restart_window` behind
    /// would be taken for a restarted sender.)
    fn assemble<A: FrameAssembler + ?Sized>(
        &self,
        from: &AssemblingSide,
        lanes: &mut [Lane],
        assembler: &mut A,
        tap: &mut Option<&mut (dyn DatagramTap + 'static)>,
    ) {
        let ordered = lanes.len() > 1;
        let mut finished = 0;
        while finished < BATCHES_PER_WAKE {
            let Some(c) = (0..lanes.len())
                .filter(|&r| lanes[r].head.is_some())
                .min_by_key(|&r| (lanes[r].head_rx_ns(), r))
            else {
                break;
            };
            if ordered {
                match self.turn(from, lanes, c) {
                    Turn::Go => {}
                    Turn::Again => continue,
                    Turn::Wait => {
                        // Its core may be shared: let it run.
                        std::thread::yield_now();
                        continue;
                    }
                }
            }
            let lane = &mut lanes[c];
            let (Some(front), Some(info)) = (lane.queue.front(), lane.head) else { break };
            let buf = front.batch.bytes(lane.next);
            lane.through_ns = lane.through_ns.max(info.rx_ns);
            deliver(assembler, self.counters, self.allow, tap.as_deref_mut(), self.local, buf, info);
            lane.next += 1;
            if lane.next == front.count {
                if let Some(done) = lane.queue.pop_front() {
                    from.give_back(done.reader, done.batch);
                }
                lane.next = 0;
                finished += 1;
            }
            lane.set_head();
        }
    }

    /// Whether lane `c`'s next datagram is the earliest that any reader
    /// holds: every other reader with nothing taken is known to have
    /// handed over all that arrived before it, is gone, or is parked with
    /// nothing in its socket that arrived earlier.
    fn turn(&self, from: &AssemblingSide, lanes: &mut [Lane], c: usize) -> Turn {
        let t = lanes[c].head_rx_ns();
        for r in 0..lanes.len() {
            if r == c || !lanes[r].queue.is_empty() || lanes[r].through_ns >= t {
                continue;
            }
            // Read before taking what waits, so that what they promise
            // covers only batches taken.
            let (gone, mark, parked) = (from.gone(r), from.drained_at(r), from.parked(r));
            let mut took = false;
            while let Some(filled) = from.next_waiting() {
                take(lanes, filled);
                took = true;
            }
            if !lanes[r].queue.is_empty() {
                return Turn::Again;
            }
            if gone {
                lanes[r].through_ns = u64::MAX;
                continue;
            }
            lanes[r].through_ns = lanes[r].through_ns.max(mark);
            if lanes[r].through_ns < t
                && let Some(parked) = parked
                && let Some(&fd) = self.sockets.get(r)
            {
                // Parked, so all it holds is in its socket: nothing there
                // and it holds nothing yet; the earliest waiting arrived
                // then and it holds nothing earlier.
                let now = clock::realtime_ns();
                let through = match peek_head(fd) {
                    Head::Empty => Some(now),
                    Head::ArrivedAt(at) => Some(at),
                    Head::Unknown => None,
                };
                if let Some(through) = through
                    && from.still_parked(r, parked)
                {
                    lanes[r].through_ns = lanes[r].through_ns.max(through);
                }
            }
            if took {
                return Turn::Again;
            }
            if lanes[r].through_ns < t {
                return Turn::Wait;
            }
        }
        Turn::Go
    }
}

/// Puts a batch taken off the channel at the back of its reader's lane.
fn take(lanes: &mut [Lane], filled: Filled) {
    let lane = &mut lanes[filled.reader];
    let was_empty = lane.queue.is_empty();
    lane.queue.push_back(filled);
    if was_empty {
        lane.next = 0;
        lane.set_head();
    }
}
