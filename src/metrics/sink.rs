//! The pure core of the result thread: drain the result ring, stamp each
//! batch with the time it was seen, record every segment, roll the
//! interval histograms into the interval log and hand each frame's line to
//! the frame log. Times are arguments.

use super::frame_log::{FrameLogFeed, FrameLogLine};
use super::histograms::LatencyHistograms;
use super::interval_log::IntervalLogFile;
use super::summary::{RecentWindow, Summary};
use crate::ring::{ResultReader, ResultRecord};

/// Called with every result as it is recorded (tests and the CLI check results with it).
pub type ResultCallback = Box<dyn FnMut(&ResultRecord) + Send>;

/// An interval log and the histograms of the interval being filled.
struct IntervalLog {
    writer: IntervalLogFile,
    /// Reset after each interval is written.
    current: LatencyHistograms,
    interval_ns: u64,
    /// Invariant: `interval_start_ns <= ` every `now_ns` given since.
    interval_start_ns: u64,
}

/// Drains a result ring into latency histograms.
pub struct ResultSink {
    reader: ResultReader,
    clock_offset_ns: i64,
    /// Drift of the consumer's clock against the host's (parts per
    /// billion, host minus GPU per unit time) and the host time the offset
    /// was measured at: a GPU time `t` converts with
    /// `offset + drift_ppb * (t_host - measured_at) / 1e9`.
    clock_drift_ppb: i64,
    clock_measured_at_ns: u64,
    totals: LatencyHistograms,
    log: Option<IntervalLog>,
    on_result: Option<ResultCallback>,
    frame_log: Option<FrameLogFeed>,
    /// Reused drain buffer, so draining does not allocate once warm.
    batch: Vec<ResultRecord>,
    /// `reader.lost()` already added to the counters.
    lost_seen: u64,
    /// Ring sequence of the newest result drained.
    last_ring_seq: u64,
    /// The histograms of the window being filled (see [`RECENT_WINDOW_NS`]).
    recent: LatencyHistograms,
    /// When that window started (0: at the first summary).
    recent_start_ns: u64,
    /// The last completed window.
    last_recent: Option<RecentWindow>,
}

/// Shortest window of the recent percentiles: a summary taken this long
/// after the window started closes it (and opens the next).
pub const RECENT_WINDOW_NS: u64 = 1_000_000_000;

impl ResultSink {
    /// A sink over `reader`; `clock_offset_ns` converts results flagged
    /// `RESULT_GPU_CLOCK` to the host clock (see `ResidentLoop::clock_offset_ns`).
    pub fn new(reader: ResultReader, clock_offset_ns: i64) -> Self {
        Self {
            reader,
            clock_offset_ns,
            clock_drift_ppb: 0,
            clock_measured_at_ns: 0,
            totals: LatencyHistograms::new(),
            log: None,
            on_result: None,
            frame_log: None,
            batch: Vec::with_capacity(1024),
            lost_seen: 0,
            last_ring_seq: 0,
            recent: LatencyHistograms::new(),
            recent_start_ns: 0,
            last_recent: None,
        }
    }

    /// Hands a line of every result recorded from now on to the frame log.
    pub fn with_frame_log(mut self, feed: FrameLogFeed) -> Self {
        self.frame_log = Some(feed);
        self
    }

    /// Calls `callback` with every result recorded from now on.
    pub fn with_callback(mut self, callback: ResultCallback) -> Self {
        self.on_result = Some(callback);
        self
    }

    /// Writes an interval of every segment to `writer` each `interval_ns`,
    /// the first interval starting at `start_ns`.
    pub fn with_interval_log(mut self, writer: IntervalLogFile, interval_ns: u64, start_ns: u64) -> Self {
        self.log = Some(IntervalLog {
            writer,
            current: LatencyHistograms::new(),
            interval_ns: interval_ns.max(1),
            interval_start_ns: start_ns,
        });
        self
    }

    /// Drains every new result, recording each as seen at `seen_ns`; returns how many.
    pub fn poll(&mut self, seen_ns: u64) -> usize {
        self.poll_then_stamp(|| seen_ns)
    }

    /// Drains every new result and only then asks `now` for the time they
    /// were seen, so a result finished during the drain never looks seen
    /// before it was done.
    pub fn poll_then_stamp(&mut self, now: impl FnOnce() -> u64) -> usize {
        self.batch.clear();
        let n = self.reader.drain(&mut self.batch);
        let seen_ns = if n > 0 { now() } else { 0 };
        if let Some(last) = self.batch.last() {
            self.last_ring_seq = last.ring_seq;
        }
        for r in &self.batch {
            let offset = self.offset_for(r);
            self.totals.record(r, seen_ns, offset);
            self.recent.record(r, seen_ns, offset);
            if let Some(feed) = &self.frame_log {
                feed.push(FrameLogLine::new(r, seen_ns, offset));
            }
            if let Some(log) = &mut self.log {
                log.current.record(r, seen_ns, offset);
            }
            if let Some(callback) = &mut self.on_result {
                callback(r);
            }
        }
        let lost = self.reader.lost();
        if lost > self.lost_seen {
            self.totals.add_results_lost(lost - self.lost_seen);
            if let Some(log) = &mut self.log {
                log.current.add_results_lost(lost - self.lost_seen);
            }
            self.lost_seen = lost;
        }
        n
    }

    /// Uses a re-measured GPU clock offset for the results that follow.
    pub fn set_clock_offset(&mut self, clock_offset_ns: i64) {
        self.set_clock(clock_offset_ns, 0, 0);
    }

    /// Uses a re-measured offset taken at host time `measured_at_ns`, and
    /// the drift between the two clocks (ppb) to extrapolate it.
    pub fn set_clock(&mut self, clock_offset_ns: i64, measured_at_ns: u64, drift_ppb: i64) {
        self.clock_offset_ns = clock_offset_ns;
        self.clock_measured_at_ns = measured_at_ns;
        self.clock_drift_ppb = drift_ppb;
    }

    /// The offset for one result: the last measurement, extrapolated by the
    /// drift to the time the result was stamped.
    fn offset_for(&self, r: &ResultRecord) -> i64 {
        if self.clock_drift_ppb == 0 || self.clock_measured_at_ns == 0 || r.done_ns == 0 {
            return self.clock_offset_ns;
        }
        let at = r.done_ns.saturating_add_signed(self.clock_offset_ns) as i128;
        let elapsed = at - self.clock_measured_at_ns as i128;
        self.clock_offset_ns + (elapsed * self.clock_drift_ppb as i128 / 1_000_000_000) as i64
    }

    /// Ring sequence of the newest result drained so far (0 before any).
    pub fn last_ring_seq(&self) -> u64 {
        self.last_ring_seq
    }

    /// The result ring the sink drains.
    pub fn ring(&self) -> &std::sync::Arc<crate::ring::ResultRing> {
        self.reader.ring()
    }

    /// The result ring sequence the sink has read up to.
    pub fn read_position(&self) -> u64 {
        self.reader.position()
    }

    /// Writes every interval that has ended by `now_ns` (an interval with no
    /// results is written empty, so the log has no gaps; one that cannot be
    /// written is counted lost by the log).
    pub fn tick(&mut self, now_ns: u64) {
        let Some(log) = &mut self.log else { return };
        while now_ns >= log.interval_start_ns + log.interval_ns {
            let end = log.interval_start_ns + log.interval_ns;
            log.writer.write_interval(&log.current, log.interval_start_ns, end);
            log.current.reset();
            log.interval_start_ns = end;
        }
    }

    /// Drains what is left and writes the last (partial) interval.
    pub fn finish(&mut self, now_ns: u64) {
        self.poll(now_ns);
        self.tick(now_ns);
        if let Some(mut log) = self.log.take()
            && (log.current.counters().processed > 0 || now_ns > log.interval_start_ns)
        {
            log.writer.write_interval(&log.current, log.interval_start_ns, now_ns.max(log.interval_start_ns));
        }
    }

    /// True while an interval log is being written.
    pub fn logging(&self) -> bool {
        self.log.is_some()
    }

    /// Histograms of every result so far.
    pub fn histograms(&self) -> &LatencyHistograms {
        &self.totals
    }

    /// Summary of every result so far.
    pub fn summary(&self) -> Summary {
        Summary::of(&self.totals)
    }

    /// Summary of every result so far, with the percentiles of the last
    /// completed recent window; closes the window being filled when it is
    /// [`RECENT_WINDOW_NS`] old at `now_ns` (the result thread asks between
    /// results, so the window's percentiles never delay one).
    pub fn summary_at(&mut self, now_ns: u64) -> Summary {
        if self.recent_start_ns == 0 {
            self.recent_start_ns = now_ns;
        } else if now_ns.saturating_sub(self.recent_start_ns) >= RECENT_WINDOW_NS {
            self.last_recent = Some(RecentWindow::of(&self.recent, self.recent_start_ns, now_ns));
            self.recent.reset();
            self.recent_start_ns = now_ns;
        }
        Summary { recent: self.last_recent.clone(), ..self.summary() }
    }
}

#[cfg(test)]
mod recent_tests {
    use super::*;
    use crate::metrics::Segment;
    use crate::ring::layout::{ResultRecord, result_ring_bytes};
    use crate::ring::{HostMemory, ResultReader, ResultRing};
    use std::sync::Arc;

    #[test]
    fn summaries_carry_the_last_window_of_a_second() {
        let ring =
            ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(64).unwrap()).unwrap()), 64).unwrap();
        let mut writer = ring.writer().unwrap();
        let mut sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), 0);
        let s0 = 1_000_000_000_000u64;
        let mut publish = |sent: u64, seen: u64, sink: &mut ResultSink| {
            writer.push(&ResultRecord { sender_ts_ns: sent, ..Default::default() });
            sink.poll(seen);
        };
        assert_eq!(sink.summary_at(s0).recent, None, "the first summary opens the first window");
        for i in 0..10 {
            publish(s0 + i, s0 + i + 100_000, &mut sink);
        }
        assert_eq!(sink.summary_at(s0 + 500_000_000).recent, None, "half a second: still open");
        let first = sink.summary_at(s0 + RECENT_WINDOW_NS).recent.unwrap();
        let e2e = first.segments.iter().find(|s| s.0 == Segment::EndToEnd).unwrap();
        assert_eq!((first.start_ns, first.end_ns, e2e.1), (s0, s0 + RECENT_WINDOW_NS, 10));
        assert!((e2e.3 - 100.0).abs() < 0.1, "{e2e:?}");
        let t1 = s0 + RECENT_WINDOW_NS;
        for i in 0..5 {
            publish(t1 + i, t1 + i + 300_000, &mut sink);
        }
        let second = sink.summary_at(t1 + 2 * RECENT_WINDOW_NS).recent.unwrap();
        let e2e = second.segments.iter().find(|s| s.0 == Segment::EndToEnd).unwrap();
        assert_eq!(e2e.1, 5, "only the window's results");
        assert!((e2e.2 - 300.0).abs() < 0.3, "{e2e:?}");
        assert_eq!(sink.summary().segment(Segment::EndToEnd).count, 15, "the totals keep everything");
    }
}

#[cfg(test)]
mod drift_tests {
    use super::*;
    use crate::ring::layout::{ResultRecord, result_ring_bytes};
    use crate::ring::{HostMemory, ResultReader, ResultRing};
    use std::sync::Arc;

    #[test]
    fn offset_is_extrapolated_by_the_drift() {
        let ring =
            ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(16).unwrap()).unwrap()), 16).unwrap();
        let mut sink = ResultSink::new(ResultReader::new(Arc::clone(&ring)), 1_000);
        let r = ResultRecord { done_ns: 2_000_000_000 - 1_000, ..Default::default() };
        assert_eq!(sink.offset_for(&r), 1_000, "no drift known: the measured offset");
        // Measured at host time 1 s; the host clock gains 5 µs per second.
        sink.set_clock(1_000, 1_000_000_000, 5_000);
        assert_eq!(sink.offset_for(&r), 1_000 + 5_000, "one second later");
    }
}
