//! Frame pacing on an absolute schedule: frame `k` is due at `t0 + k / rate`,
//! so waiting errors never accumulate. Long gaps sleep; the last
//! [`SPIN_NS`] before a deadline spin on the clock, because a sleep wakes up
//! tens of microseconds late.

use crate::clock::monotonic_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long before a deadline the waiter stops sleeping and spins.
pub const SPIN_NS: u64 = 80_000;
/// Longest single sleep, so a stop request is seen within this time.
const MAX_SLEEP_NS: u64 = 20_000_000;

/// When each frame of a run is due and when the run ends. Pure: times are arguments.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Monotonic time of frame 0, ns.
    start_ns: u64,
    /// Nanoseconds between frames; finite and > 0.
    period_ns: f64,
    /// Frames to send, if bounded by count.
    count: Option<u64>,
    /// Frames due at or after this monotonic time are not sent, if bounded by time.
    end_ns: Option<u64>,
}

impl Schedule {
    /// `rate` frames per second from `start_ns`; `rate` must be finite and > 0.
    pub fn new(start_ns: u64, rate: f64, count: Option<u64>, duration: Option<Duration>) -> Self {
        debug_assert!(rate.is_finite() && rate > 0.0);
        Schedule {
            start_ns,
            period_ns: 1e9 / rate,
            count,
            end_ns: duration.map(|d| start_ns.saturating_add(d.as_nanos().min(u64::MAX as u128) as u64)),
        }
    }

    /// When the first frame was due (CLOCK_REALTIME, ns).
    pub fn start_ns(&self) -> u64 {
        self.start_ns
    }

    /// Nanoseconds between two frames.
    pub fn period_ns(&self) -> f64 {
        self.period_ns
    }

    /// Monotonic time at which frame `k` is due.
    pub fn due_ns(&self, k: u64) -> u64 {
        self.start_ns.saturating_add((k as f64 * self.period_ns).round() as u64)
    }

    /// Moves the schedule so that frame `k` is due at `now_ns` (and every
    /// later frame a period after the one before), keeping the end of a
    /// run bounded by time where it was: the frames a late sender would
    /// otherwise send to catch up are not sent. Returns how many frames the
    /// run loses by it: those the old schedule had before the end and the
    /// new one has not, frame `k` aside (it still goes); none for a run
    /// bounded by count only (it sends them
    /// all, later); the frames of the deficit for an unbounded run.
    pub fn rebase(&mut self, k: u64, now_ns: u64) -> u64 {
        let deficit_ns = now_ns.saturating_sub(self.due_ns(k));
        let before = self.frames_before_end();
        let offset = (k as f64 * self.period_ns).round() as u64;
        self.start_ns = now_ns.saturating_sub(offset);
        match (before, self.frames_before_end(), self.count) {
            // Frame k itself still goes, even where it is now due after the end.
            (Some(before), Some(after), _) => before.saturating_sub(after.max(k + 1)),
            (_, _, Some(_)) => 0,
            _ => (deficit_ns as f64 / self.period_ns) as u64,
        }
    }

    /// Frames due before the end of a run bounded by time: the first `k`
    /// with `due_ns(k) >= end`.
    fn frames_before_end(&self) -> Option<u64> {
        let end = self.end_ns?;
        let mut k = (end.saturating_sub(self.start_ns) as f64 / self.period_ns).ceil() as u64;
        // The estimate is within one of the exact count (due times round).
        while k > 0 && self.due_ns(k - 1) >= end {
            k -= 1;
        }
        while self.due_ns(k) < end {
            k += 1;
        }
        Some(k)
    }

    /// Whether frame `k` is past the end of the run.
    pub fn is_past_end(&self, k: u64) -> bool {
        self.count.is_some_and(|c| k >= c) || self.end_ns.is_some_and(|end| self.due_ns(k) >= end)
    }
}

/// How a sender waits for a frame's due time.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum Pacing {
    /// Sleep until [`SPIN_NS`] before the due time, then spin on the clock:
    /// each frame leaves within a microsecond or so of its time, at the cost
    /// of a core kept busy whenever frames are less than [`SPIN_NS`] apart.
    #[default]
    Spin,
    /// Only sleep (with 1 µs timer slack): frames may leave tens of
    /// microseconds late, but the sender leaves the CPU to others between
    /// sends. For throughput runs on machines with few cores, where a
    /// spinning sender takes a core from the receiver.
    Sleep,
}

/// Bytes a datagram occupies on an Ethernet link beyond its UDP payload:
/// UDP header 8, IPv4 header 20, Ethernet header 14 and FCS 4, preamble 8,
/// inter-frame gap 12.
pub const LINK_FRAMING_BYTES: u64 = 66;

/// The pace of a link of a given bit rate: a frame's datagrams leave no
/// faster than such a link would carry them, as from a sensor on that link,
/// instead of in one burst at the speed of memory. Pure: times are arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkPace {
    /// Nanoseconds the link takes per byte; finite and > 0.
    ns_per_byte: f64,
}

impl LinkPace {
    /// A link of `gbps` gigabits per second; `gbps` must be finite and > 0.
    pub fn new(gbps: f64) -> Self {
        debug_assert!(gbps.is_finite() && gbps > 0.0);
        LinkPace { ns_per_byte: 8.0 / gbps }
    }

    /// Link bytes of `datagrams` datagrams holding `payload_bytes` of UDP payload in all.
    pub fn wire_bytes(payload_bytes: u64, datagrams: u64) -> u64 {
        payload_bytes + datagrams * LINK_FRAMING_BYTES
    }

    /// Nanoseconds the link takes for `wire_bytes`.
    pub fn link_ns(&self, wire_bytes: u64) -> u64 {
        (wire_bytes as f64 * self.ns_per_byte).round() as u64
    }

    /// When a datagram may leave: `wire_bytes_before` link bytes of its frame
    /// went before it, and the frame's first datagram left at `frame_start_ns`.
    pub fn due_ns(&self, frame_start_ns: u64, wire_bytes_before: u64) -> u64 {
        frame_start_ns.saturating_add(self.link_ns(wire_bytes_before))
    }
}

/// How far behind its schedule a sender may fall before it gives up
/// catching up: it then drops the deficit and goes on at the rate from
/// there (counted in `schedule_rebases` and `skipped_frames`).
pub const MAX_CATCH_UP_NS: u64 = 5_000_000;

/// How long a burst of frames a late sender may send back to back, in time
/// at its catch-up rate: a wake-up this late still sends every frame due.
/// Sleeps on virtual machines often end 100-250 µs late; a shorter burst
/// loses that time at every wake-up, and the sender falls behind its rate.
pub const CATCH_UP_BURST_NS: u64 = 250_000;

/// How a sender behind its schedule catches up: no faster than `ratio`
/// times the schedule's rate on average, with at most [`CATCH_UP_BURST_NS`]
/// of frames at that rate back to back, so a sender that woke late neither
/// drops the frames it owes nor sends them to the receiver in one burst.
/// A virtual-scheduling rate limiter (the generic cell rate algorithm):
/// each frame sent moves the next frame's earliest time on by `gap_ns`,
/// counted from the later of that time and the send. Pure: times are arguments.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CatchUp {
    /// Nanoseconds between frames at the catch-up rate; finite and > 0.
    gap_ns: f64,
    /// When the next frame would leave sent exactly at the catch-up rate.
    next_ns: f64,
}

impl CatchUp {
    /// Catching up at `ratio` times the rate of frames `period_ns` apart;
    /// `ratio` must be finite and at least 1, `period_ns` finite and > 0.
    pub fn new(period_ns: f64, ratio: f64, start_ns: u64) -> Self {
        debug_assert!(ratio.is_finite() && ratio >= 1.0);
        debug_assert!(period_ns.is_finite() && period_ns > 0.0);
        CatchUp { gap_ns: period_ns / ratio, next_ns: start_ns as f64 }
    }

    /// The earliest time the next frame may leave.
    pub fn earliest_ns(&self) -> u64 {
        (self.next_ns - CATCH_UP_BURST_NS as f64).max(0.0) as u64
    }

    /// Records a frame sent at `at_ns`.
    pub fn sent(&mut self, at_ns: u64) {
        self.next_ns = self.next_ns.max(at_ns as f64) + self.gap_ns;
    }
}

/// Waits until monotonic time `due_ns`, returning the time it woke up, or
/// `None` if `stop` was raised first.
pub fn wait_until(due_ns: u64, stop: &AtomicBool) -> Option<u64> {
    wait_until_paced(due_ns, stop, Pacing::Spin)
}

/// [`wait_until`] with the given [`Pacing`].
pub fn wait_until_paced(due_ns: u64, stop: &AtomicBool, pacing: Pacing) -> Option<u64> {
    let spin_ns = match pacing {
        Pacing::Spin => SPIN_NS,
        Pacing::Sleep => 0,
    };
    loop {
        if stop.load(Ordering::Relaxed) {
            return None;
        }
        let now = monotonic_ns();
        if now >= due_ns {
            return Some(now);
        }
        let left = due_ns - now;
        if left > spin_ns {
            std::thread::sleep(Duration::from_nanos((left - spin_ns).min(MAX_SLEEP_NS)));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_times_are_absolute_and_do_not_drift() {
        let s = Schedule::new(1_000, 3.0, None, None);
        assert_eq!(s.due_ns(0), 1_000);
        assert_eq!(s.due_ns(1), 1_000 + 333_333_333);
        assert_eq!(s.due_ns(3), 1_000 + 1_000_000_000);
        assert_eq!(s.due_ns(3_000_000), 1_000 + 1_000_000_000_000_000);
    }

    #[test]
    fn a_rebased_schedule_continues_at_the_rate_from_now_and_ends_where_it_did() {
        let mut s = Schedule::new(0, 1000.0, None, Some(Duration::from_secs(1)));
        assert_eq!(s.rebase(10, 500_000_000), 490, "frames 510..999 no longer fit the run");
        assert_eq!(s.due_ns(10), 500_000_000);
        assert_eq!(s.due_ns(11), 501_000_000);
        assert!(!s.is_past_end(509));
        assert!(s.is_past_end(510), "the end stays at 1 s: frame 510 would be due then");
        assert_eq!(s.rebase(505, 1_200_000_000), 4, "frame 505 still goes, after the end; 506..509 not");
        let mut by_count = Schedule::new(0, 1000.0, Some(100), None);
        assert_eq!(by_count.rebase(10, 50_000_000), 0, "a counted run sends all its frames, later");
        let mut unbounded = Schedule::new(0, 1000.0, None, None);
        assert_eq!(unbounded.rebase(10, 50_500_000), 40, "the 40.5 ms deficit, in whole frames");
    }

    #[test]
    fn a_late_sender_catches_up_at_its_ratio_in_bounded_bursts() {
        // 1,000 frames/s, caught up at 1.25x: 800 µs between frames, bursts of 250 µs.
        assert_eq!(CATCH_UP_BURST_NS, 250_000);
        let mut c = CatchUp::new(1_000_000.0, 1.25, 0);
        assert_eq!(c.earliest_ns(), 0);
        c.sent(0);
        assert_eq!(c.earliest_ns(), 550_000, "the next frame no sooner than 800 µs on, less the burst");
        // Woke 5 ms late: one frame at once, then the next 800 µs after it (less the burst).
        c.sent(5_000_000);
        assert_eq!(c.earliest_ns(), 5_550_000);
        c.sent(5_550_000);
        assert_eq!(c.earliest_ns(), 6_350_000, "counted from when the frame was due to go, not sent");
        // A sender that waited past its time gets no credit for the wait beyond the burst.
        c.sent(20_000_000);
        assert_eq!(c.earliest_ns(), 20_550_000);
        // Frames closer than the burst go back to back until it is used up.
        let mut fast = CatchUp::new(10_000.0, 1.0, 0);
        let mut back_to_back = 0;
        while fast.earliest_ns() <= 1_000 {
            fast.sent(1_000);
            back_to_back += 1;
        }
        assert_eq!(back_to_back, 26, "250 µs of 10 µs frames, and the one at the start");
    }

    #[test]
    fn run_ends_by_count_or_by_duration() {
        let by_count = Schedule::new(0, 1000.0, Some(5), None);
        assert!(!by_count.is_past_end(4));
        assert!(by_count.is_past_end(5));
        let by_time = Schedule::new(0, 1000.0, None, Some(Duration::from_millis(300)));
        assert!(!by_time.is_past_end(299));
        assert!(by_time.is_past_end(300));
        assert!(!Schedule::new(0, 1000.0, None, None).is_past_end(u64::MAX / 2_000_000));
    }

    #[test]
    fn a_link_spaces_datagrams_by_their_bytes_with_ethernet_framing() {
        let ten = LinkPace::new(10.0);
        assert_eq!(LinkPace::wire_bytes(8972, 1), 8972 + 66);
        assert_eq!(LinkPace::wire_bytes(3 * 1472, 3), 3 * 1538);
        // 1,538 link bytes of a 1,472-byte datagram take 1,230.4 ns at 10 Gb/s.
        assert_eq!(ten.link_ns(1538), 1230);
        assert_eq!(ten.due_ns(5_000, 0), 5_000, "the first datagram leaves at the frame's start");
        assert_eq!(ten.due_ns(5_000, 2 * 1538), 5_000 + 2461);
        assert_eq!(LinkPace::new(100.0).link_ns(1_000_000), 80_000);
    }

    #[test]
    fn wait_returns_at_or_after_the_deadline_and_honours_stop() {
        let stop = AtomicBool::new(false);
        let due = monotonic_ns() + 2_000_000;
        assert!(wait_until(due, &stop).unwrap() >= due);
        stop.store(true, Ordering::Relaxed);
        assert_eq!(wait_until(monotonic_ns() + 10_000_000_000, &stop), None);
        stop.store(false, Ordering::Relaxed);
        let due = monotonic_ns() + 2_000_000;
        assert!(wait_until_paced(due, &stop, Pacing::Sleep).unwrap() >= due);
    }
}
