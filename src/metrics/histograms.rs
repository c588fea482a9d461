//! One HDR histogram per latency segment plus frame counters by outcome.
//! Recording saturates instead of failing, so the hot path never errs.

use super::segment::{Segment, SegmentSpan, segment_spans};
use crate::ring::ResultRecord;
use crate::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE};
use hdrhistogram::Histogram;

/// Lowest value the histograms distinguish (ns).
pub const LOWEST_NS: u64 = 1;
/// Highest value the histograms track (ns): one hour. Longer spans are
/// recorded as one hour.
pub const HIGHEST_NS: u64 = 3_600 * 1_000_000_000;
/// Significant decimal digits kept.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// Frames by outcome, as seen by the result thread.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FrameCounters {
    /// Results recorded (frames the chain ran on).
    pub processed: u64,
    /// Of those, frames whose every packet arrived.
    pub complete: u64,
    /// Of those, frames published with packets missing.
    pub incomplete: u64,
    /// Frames the consumer skipped (policy `latest`), from `skipped_before`.
    pub skipped: u64,
    /// Results overwritten in the result ring before the host read them.
    pub results_lost: u64,
}

impl FrameCounters {
    /// Name/value rows for a counter table.
    pub fn rows(&self) -> [(&'static str, u64); 5] {
        [
            ("processed", self.processed),
            ("complete", self.complete),
            ("incomplete", self.incomplete),
            ("skipped", self.skipped),
            ("results lost", self.results_lost),
        ]
    }
}

/// Percentiles of one segment, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Percentiles {
    /// The median.
    pub p50_us: f64,
    /// The 90th percentile.
    pub p90_us: f64,
    /// The 99th percentile.
    pub p99_us: f64,
    /// The 99.9th percentile.
    pub p99_9_us: f64,
    /// The largest value recorded.
    pub max_us: f64,
    /// The mean.
    pub mean_us: f64,
}

impl Percentiles {
    /// Percentiles of a nanosecond histogram (all 0 when it is empty), and
    /// the mean of its values from their sum `sum_ns` (exact, and without
    /// the walk over every bucket that the histogram's own mean takes:
    /// 30-50 µs per segment once its values reach a few hundred µs).
    pub fn of(h: &Histogram<u64>, sum_ns: u128) -> Self {
        if h.is_empty() {
            return Self::default();
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let mut at = h.value_at_quantiles([0.50, 0.90, 0.99, 0.999]).map(us);
        let mut next = || at.next().unwrap_or_default();
        Self {
            p50_us: next(),
            p90_us: next(),
            p99_us: next(),
            p99_9_us: next(),
            max_us: us(h.max()),
            mean_us: sum_ns as f64 / h.len() as f64 / 1000.0,
        }
    }
}

/// The quantiles of a [`PercentileCurve`]: the points an HdrHistogram
/// percentile plot draws, spaced evenly on its log axis `1 / (1 - q)`, and
/// the maximum (q = 1).
pub const CURVE_QUANTILES: [f64; 13] =
    [0.0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9995, 0.9999, 0.99995, 0.99999, 1.0];

/// One segment's latency at each of [`CURVE_QUANTILES`], in microseconds:
/// the percentile distribution the live view and the HTML reports plot.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PercentileCurve {
    /// Values recorded (0: the curve is empty).
    pub count: u64,
    /// Latency (µs) at `CURVE_QUANTILES[i]`.
    pub us: [f64; CURVE_QUANTILES.len()],
}

impl PercentileCurve {
    /// The curve of a nanosecond histogram (all 0 when it is empty).
    pub fn of(h: &Histogram<u64>) -> Self {
        let mut curve = Self { count: h.len(), ..Self::default() };
        if h.is_empty() {
            return curve;
        }
        for (slot, ns) in curve.us.iter_mut().zip(h.value_at_quantiles(CURVE_QUANTILES)) {
            *slot = ns as f64 / 1000.0;
        }
        curve
    }

    /// (quantile, µs) pairs, the maximum last; none when the curve is empty.
    pub fn points(&self) -> Vec<(f64, f64)> {
        if self.count == 0 {
            return Vec::new();
        }
        CURVE_QUANTILES.iter().copied().zip(self.us).collect()
    }
}

/// A nanosecond histogram with the bounds every segment uses.
pub fn new_segment_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(LOWEST_NS, HIGHEST_NS, SIGNIFICANT_DIGITS)
        .expect("constant histogram bounds are valid")
}

/// Histograms of every [`Segment`], skew and missing-stamp counts per
/// segment, and frame counters.
#[derive(Debug, Clone)]
pub struct LatencyHistograms {
    /// Indexed like [`Segment::ALL`].
    histograms: [Histogram<u64>; Segment::COUNT],
    /// Sum of the values recorded in each histogram (ns, as recorded:
    /// negative spans as 0, spans past [`HIGHEST_NS`] as that).
    sums_ns: [u128; Segment::COUNT],
    /// Spans that came out negative (clock skew), recorded as 0.
    negative: [u64; Segment::COUNT],
    /// Spans with an end never stamped, not recorded.
    unstamped: [u64; Segment::COUNT],
    counters: FrameCounters,
}

impl Default for LatencyHistograms {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistograms {
    /// Empty histograms, one per [`Segment`].
    pub fn new() -> Self {
        Self {
            histograms: std::array::from_fn(|_| new_segment_histogram()),
            sums_ns: [0; Segment::COUNT],
            negative: [0; Segment::COUNT],
            unstamped: [0; Segment::COUNT],
            counters: FrameCounters::default(),
        }
    }

    /// Records every segment of one result seen by the host at `seen_ns`,
    /// and counts its outcome.
    pub fn record(&mut self, r: &ResultRecord, seen_ns: u64, clock_offset_ns: i64) {
        for (segment, span) in Segment::ALL.into_iter().zip(segment_spans(r, seen_ns, clock_offset_ns)) {
            self.record_span(segment, span);
        }
        self.counters.processed += 1;
        self.counters.complete += u64::from(r.slot_flags & SLOT_COMPLETE != 0);
        self.counters.incomplete += u64::from(r.slot_flags & SLOT_INCOMPLETE != 0);
        self.counters.skipped += r.skipped_before;
    }

    /// Records one span; negative spans count as 0 and are counted.
    pub fn record_span(&mut self, segment: Segment, span: SegmentSpan) {
        let i = segment.index();
        match span {
            SegmentSpan::Ns(ns) => {
                self.histograms[i].saturating_record(ns);
                self.sums_ns[i] += u128::from(ns.min(HIGHEST_NS));
            }
            SegmentSpan::Negative => {
                self.negative[i] += 1;
                self.histograms[i].saturating_record(0);
            }
            SegmentSpan::Unstamped => self.unstamped[i] += 1,
        }
    }

    /// Adds results lost in the result ring.
    pub fn add_results_lost(&mut self, lost: u64) {
        self.counters.results_lost += lost;
    }

    /// The histogram of `segment` (nanoseconds).
    pub fn histogram(&self, segment: Segment) -> &Histogram<u64> {
        &self.histograms[segment.index()]
    }

    /// Spans of `segment` that were negative and recorded as 0.
    pub fn negative(&self, segment: Segment) -> u64 {
        self.negative[segment.index()]
    }

    /// Results whose `segment` could not be computed for a missing stamp.
    pub fn unstamped(&self, segment: Segment) -> u64 {
        self.unstamped[segment.index()]
    }

    /// The frame and result counters.
    pub fn counters(&self) -> &FrameCounters {
        &self.counters
    }

    /// The percentiles of `segment`, in microseconds.
    pub fn percentiles(&self, segment: Segment) -> Percentiles {
        Percentiles::of(self.histogram(segment), self.sums_ns[segment.index()])
    }

    /// The percentiles and the percentile distribution of one segment, in
    /// one walk over its histogram (the curve's quantiles include the
    /// percentiles').
    pub fn percentiles_and_curve(&self, segment: Segment) -> (Percentiles, PercentileCurve) {
        let h = self.histogram(segment);
        let curve = PercentileCurve::of(h);
        if h.is_empty() {
            return (Percentiles::default(), curve);
        }
        let at = |q: f64| CURVE_QUANTILES.iter().position(|&c| c == q).map_or(0.0, |i| curve.us[i]);
        let percentiles = Percentiles {
            p50_us: at(0.5),
            p90_us: at(0.9),
            p99_us: at(0.99),
            p99_9_us: at(0.999),
            max_us: h.max() as f64 / 1000.0,
            mean_us: self.sums_ns[segment.index()] as f64 / h.len() as f64 / 1000.0,
        };
        (percentiles, curve)
    }

    /// Empties every histogram and counter (for interval sets).
    pub fn reset(&mut self) {
        for h in &mut self.histograms {
            h.reset();
        }
        self.sums_ns = [0; Segment::COUNT];
        self.negative = [0; Segment::COUNT];
        self.unstamped = [0; Segment::COUNT];
        self.counters = FrameCounters::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::layout::{RESULT_GPU_CLOCK, SLOT_COMPLETE};

    fn record(first_rx: u64, flags: u32) -> ResultRecord {
        ResultRecord {
            sender_ts_ns: 10_000,
            first_rx_ns: first_rx,
            published_ns: 20_000,
            detect_ns: 21_000,
            done_ns: 31_000,
            slot_flags: flags,
            ..Default::default()
        }
    }

    #[test]
    fn records_each_segment_and_counts_outcomes() {
        let mut h = LatencyHistograms::new();
        for i in 0..1000u64 {
            let mut r = record(12_000, if i % 10 == 0 { SLOT_INCOMPLETE } else { SLOT_COMPLETE });
            r.skipped_before = u64::from(i % 100 == 0);
            h.record(&r, 41_000 + i * 10, 0);
        }
        let c = h.counters();
        assert_eq!((c.processed, c.complete, c.incomplete, c.skipped), (1000, 900, 100, 10));
        assert_eq!(h.histogram(Segment::Wire).len(), 1000);
        let wire = h.percentiles(Segment::Wire);
        assert!((wire.p50_us - 2.0).abs() < 0.01 && (wire.max_us - 2.0).abs() < 0.01, "{wire:?}");
        let seen = h.percentiles(Segment::DoneToSeen);
        // 10_000 + 10 * i ns for i in 0..1000: median ~15 µs, max ~20 µs.
        assert!((seen.p50_us - 15.0).abs() < 0.05, "{seen:?}");
        assert!((seen.max_us - 19.99).abs() < 0.05, "{seen:?}");
        assert!(seen.p50_us <= seen.p90_us && seen.p90_us <= seen.p99_us && seen.p99_us <= seen.p99_9_us);
        let e2e = h.percentiles(Segment::EndToEnd);
        assert!((e2e.p50_us - 36.0).abs() < 0.05, "{e2e:?}");
    }

    /// The percentiles are the histogram's own; the mean is the exact mean of
    /// the values as recorded (negative spans as 0, huge ones as one hour).
    #[test]
    fn percentiles_are_the_histograms_and_the_mean_is_exact() {
        let mut h = LatencyHistograms::new();
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut values = Vec::new();
        for _ in 0..5_001 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let ns = 1 + x % 3_000_000;
            values.push(ns);
            h.record_span(Segment::Compute, SegmentSpan::Ns(ns));
        }
        h.record_span(Segment::Compute, SegmentSpan::Negative);
        h.record_span(Segment::Compute, SegmentSpan::Ns(u64::MAX));
        values.extend([0, HIGHEST_NS]);
        let p = h.percentiles(Segment::Compute);
        let hist = h.histogram(Segment::Compute);
        let us = |ns: u64| ns as f64 / 1000.0;
        assert_eq!(p.p50_us, us(hist.value_at_quantile(0.50)));
        assert_eq!(p.p90_us, us(hist.value_at_quantile(0.90)));
        assert_eq!(p.p99_us, us(hist.value_at_quantile(0.99)));
        assert_eq!(p.p99_9_us, us(hist.value_at_quantile(0.999)));
        assert_eq!(p.max_us, us(hist.max()));
        let mean_ns = values.iter().map(|&v| u128::from(v)).sum::<u128>() as f64 / values.len() as f64;
        assert!((p.mean_us * 1000.0 - mean_ns).abs() < 1e-6 * mean_ns, "{} against {mean_ns}", p.mean_us);
        let (same, curve) = h.percentiles_and_curve(Segment::Compute);
        assert_eq!(same, p, "one walk gives the same percentiles");
        for (q, at) in CURVE_QUANTILES.iter().zip(curve.us) {
            assert_eq!(at, us(hist.value_at_quantile(*q)), "the curve at {q}");
        }
        h.reset();
        assert_eq!(h.percentiles(Segment::Compute), Percentiles::default());
        h.record_span(Segment::Compute, SegmentSpan::Ns(4_000));
        assert_eq!(h.percentiles(Segment::Compute).mean_us, 4.0, "the sum starts over with the histogram");
    }

    #[test]
    fn clock_skew_is_clamped_and_counted_without_poisoning() {
        let mut h = LatencyHistograms::new();
        // First packet "before" the sender stamped it: sender clock ahead.
        h.record(&record(9_000, SLOT_COMPLETE), 41_000, 0);
        h.record(&record(12_000, SLOT_COMPLETE), 41_000, 0);
        assert_eq!(h.negative(Segment::Wire), 1);
        assert_eq!(h.histogram(Segment::Wire).len(), 2);
        assert_eq!(h.histogram(Segment::Wire).min(), 0);
        assert_eq!(h.negative(Segment::Assembly), 0);
        assert!((h.percentiles(Segment::Wire).max_us - 2.0).abs() < 0.01);
    }

    #[test]
    fn huge_and_unstamped_spans_never_fail() {
        let mut h = LatencyHistograms::new();
        let mut r = record(12_000, 0);
        r.done_ns = u64::MAX / 2;
        h.record(&r, u64::MAX, 0);
        r.sender_ts_ns = 0;
        h.record(&r, 1, 0);
        // A GPU-clock result with an absurd offset saturates instead of wrapping.
        r.result_flags = RESULT_GPU_CLOCK;
        h.record(&r, 1, i64::MIN);
        assert_eq!(h.histogram(Segment::Compute).len(), 2);
        assert!(h.histogram(Segment::Compute).max() >= HIGHEST_NS);
        assert_eq!(h.negative(Segment::DoneToSeen), 1);
        assert_eq!(h.unstamped(Segment::EndToEnd), 2);
        assert_eq!(h.unstamped(Segment::Compute), 1);
        assert_eq!(h.counters().processed, 3);
        h.reset();
        assert!(h.histogram(Segment::Compute).is_empty());
        assert_eq!(h.counters().processed, 0);
    }
}
