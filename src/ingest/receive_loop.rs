//! The receive loop every reading thread runs: read the socket dry, wait
//! in epoll only once it was found empty (and, with a poll budget, stayed
//! empty that long), tick the assembler, count busy-poll gaps.

use super::counters::IngestCounters;
use super::error::IngestError;
use crate::clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Batches read per wake-up before the stop flag and ticks get a turn.
pub(super) const BATCHES_PER_WAKE: usize = 64;

/// The thread that reads the socket, as [`receive_loop`] drives it.
pub(super) trait SocketReader {
    /// Waits until the socket is readable or the readiness timeout passed.
    fn wait_readable(&mut self) -> Result<(), IngestError>;
    /// The thread comes back after being away from the socket (a wait, or
    /// a turn that was a gap): a backlog may wait.
    fn prepare_for_backlog(&mut self);
    /// Reads until the socket is empty (or for a bounded while).
    fn read_available(&mut self) -> Result<Drained, IngestError>;
    /// A turn that read what `drained` says ended at `now_ns`.
    fn end_turn(&mut self, drained: &Drained, now_ns: u64);
}

/// The receive loop, until `stop` is set: a turn reads the socket dry; it
/// waits in epoll only once a read found the socket empty, and (with a
/// `poll_budget`) only after it stayed empty that long. The socket is
/// edge-triggered, so a turn must read until empty before it waits.
pub(super) fn receive_loop(
    reader: &mut impl SocketReader,
    stop: &AtomicBool,
    poll_budget: Duration,
    counters: &IngestCounters,
) -> Result<(), IngestError> {
    let busy_polling = !poll_budget.is_zero();
    let budget_ns = u64::try_from(poll_budget.as_nanos()).unwrap_or(u64::MAX);
    // One clock read a turn serves the poll budget, the gap counter and
    // the tick (a busy-polling turn that finds the socket empty is short,
    // and a second read was a noticeable part of it).
    let mut now = clock::realtime_ns();
    let mut last_data_ns = now;
    let mut turns = BusyPollTurns::new(now);
    let mut away = false;
    let mut waits = !busy_polling;
    while !stop.load(Ordering::Acquire) {
        if waits {
            reader.wait_readable()?;
        }
        if busy_polling && (waits || away) {
            reader.prepare_for_backlog();
        }
        let drained = reader.read_available()?;
        now = clock::realtime_ns();
        if drained.buffers > 0 {
            last_data_ns = now;
        }
        away = busy_polling && turns.gap_after(now, waits);
        if away {
            IngestCounters::bump(&counters.busy_poll_gaps);
        }
        reader.end_turn(&drained, now);
        // A clock set back restarts the budget instead of stretching it.
        last_data_ns = last_data_ns.min(now);
        waits = drained.empty && (!busy_polling || now - last_data_ns >= budget_ns);
    }
    Ok(())
}

/// What one [`SocketReader::read_available`] read.
pub(super) struct Drained {
    /// Buffers (datagrams, or GRO buffers of several) taken off the socket.
    pub(super) buffers: usize,
    /// The last read came back short: the socket was empty then.
    pub(super) empty: bool,
}

/// A receive-loop turn longer than this without a wait in epoll counts in
/// `busy_poll_gaps`.
const BUSY_POLL_GAP_NS: u64 = 50_000;

/// The end time of the receive loop's last turn, to find the turns of a
/// busy-polling receiver that left the socket unread too long.
struct BusyPollTurns {
    last_end_ns: u64,
}

impl BusyPollTurns {
    fn new(now_ns: u64) -> Self {
        Self { last_end_ns: now_ns }
    }

    /// Ends a turn at `now_ns`; whether it was a gap: longer than
    /// [`BUSY_POLL_GAP_NS`] although it did not wait for readiness (a turn
    /// that `waited` found the socket empty and slept on purpose).
    fn gap_after(&mut self, now_ns: u64, waited: bool) -> bool {
        let took = now_ns.saturating_sub(self.last_end_ns);
        self.last_end_ns = now_ns;
        !waited && took > BUSY_POLL_GAP_NS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_long_turns_that_did_not_wait_are_busy_poll_gaps() {
        let mut turns = BusyPollTurns::new(1_000_000);
        assert!(!turns.gap_after(1_000_000 + BUSY_POLL_GAP_NS, false), "exactly the limit is no gap");
        assert!(turns.gap_after(1_000_000 + 2 * BUSY_POLL_GAP_NS + 1, false));
        assert!(!turns.gap_after(1_000_000 + 10 * BUSY_POLL_GAP_NS, true), "a wait in epoll is no gap");
        assert!(!turns.gap_after(1_000_000 + 10 * BUSY_POLL_GAP_NS + 3_000, false));
        // A clock that stepped back is no gap either.
        assert!(!turns.gap_after(5, false));
    }
}
