//! What the live view knows besides the metrics snapshot: facts fixed at
//! start-up (backend, GPU, loops, streams, chain) and the latency curves
//! with their recent p50/p99 history, which the control loop publishes
//! with each metrics snapshot. Pure data: times are passed in.

use crate::metrics::{CURVE_QUANTILES, Summary};
use crate::plot::CurveSeries;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Facts about the running appliance that do not change while it runs
/// (a reload that changes them restarts the appliance).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ApplianceFacts {
    pub version: String,
    /// "host" or "cuda".
    pub backend: String,
    /// Why that backend was taken (for example the GPU's name).
    pub backend_reason: String,
    /// The GPU the loop runs on, when one does.
    pub gpu: Option<String>,
    /// Address the receiver listens on.
    pub listen: String,
    /// The resident loops: one entry per `[[loop]]` (its name, GPU and
    /// streams), or one for the single loop.
    pub loops: Vec<LoopFacts>,
    /// The chain's operators, in order.
    pub chain: Vec<String>,
    /// The config file, when one was given.
    pub config_path: Option<String>,
    /// When the appliance started (for the uptime).
    #[serde(skip)]
    pub started: Option<Instant>,
}

/// One resident loop as the page lists it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LoopFacts {
    pub name: String,
    /// The GPU ordinal, when the loop runs on one.
    pub gpu: Option<usize>,
    /// The stream ids it takes (empty: every stream that arrives).
    pub streams: Vec<u32>,
}

impl ApplianceFacts {
    /// Seconds since start-up at `now`.
    pub fn uptime_s(&self, now: Instant) -> f64 {
        self.started.map_or(0.0, |s| now.saturating_duration_since(s).as_secs_f64())
    }
}

/// One segment's p50 and p99 (µs) over one window.
#[derive(Debug, Clone, PartialEq)]
struct SegmentPoint {
    segment: String,
    p50_us: f64,
    p99_us: f64,
}

/// Recent p50 and p99 of each segment: one entry per window of about a
/// second ([`crate::metrics::RecentWindow`]), for the last
/// [`HISTORY_SECONDS`] seconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LatencyHistory {
    /// (window end, CLOCK_REALTIME ns; every segment's point), oldest first.
    entries: VecDeque<(u64, Vec<SegmentPoint>)>,
}

/// How much history is kept, seconds.
pub const HISTORY_SECONDS: u64 = 300;

impl LatencyHistory {
    /// Records the recent window of `summary`, unless it was recorded
    /// already (or the summary has none); drops entries that ended more than
    /// [`HISTORY_SECONDS`] before it.
    pub fn record(&mut self, summary: &Summary) {
        let Some(window) = &summary.recent else { return };
        if self.entries.back().is_some_and(|(end, _)| *end >= window.end_ns) {
            return;
        }
        let row = window
            .segments
            .iter()
            .map(|&(segment, _, p50_us, p99_us)| SegmentPoint {
                segment: segment.name().to_string(),
                p50_us,
                p99_us,
            })
            .collect();
        self.entries.push_back((window.end_ns, row));
        let oldest = window.end_ns.saturating_sub(HISTORY_SECONDS * 1_000_000_000);
        while self.entries.front().is_some_and(|(end, _)| *end < oldest) {
            self.entries.pop_front();
        }
    }

    /// Entries kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True before the first entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// One segment's (seconds before `now_ns`, negative; p50 µs, p99 µs)
    /// points, one per window it had values in.
    pub fn series(&self, segment: &str, now_ns: u64) -> Vec<(f64, f64, f64)> {
        self.entries
            .iter()
            .filter_map(|(end, row)| {
                let ago = -(now_ns.saturating_sub(*end) as f64 / 1e9);
                row.iter().find(|p| p.segment == segment).map(|p| (ago, p.p50_us, p.p99_us))
            })
            .collect()
    }
}

/// The latency curves and history the control loop publishes and the
/// server reads; cloning gives another handle to the same state.
#[derive(Debug, Clone, Default)]
pub struct LiveLatency {
    state: Arc<Mutex<LatencyState>>,
}

#[derive(Debug, Default)]
struct LatencyState {
    curves: Vec<CurveSeries>,
    history: LatencyHistory,
    /// Frames processed per second in the last window.
    frame_rate: Option<f64>,
}

impl LiveLatency {
    fn lock(&self) -> std::sync::MutexGuard<'_, LatencyState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Publishes the curves of `summary` (every segment with values) and
    /// records its recent window's p50/p99 in the history.
    pub fn publish(&self, summary: &Summary) {
        let curves = summary
            .segments
            .iter()
            .filter(|s| s.count > 0)
            .map(|s| CurveSeries {
                name: s.segment.name().to_string(),
                count: s.curve.count,
                points: s.curve.points(),
            })
            .collect();
        let mut state = self.lock();
        state.curves = curves;
        state.history.record(summary);
        if let Some(w) = &summary.recent
            && w.end_ns > w.start_ns
        {
            state.frame_rate = Some(w.frames as f64 * 1e9 / (w.end_ns - w.start_ns) as f64);
        }
    }

    /// The latest curves.
    pub fn curves(&self) -> Vec<CurveSeries> {
        self.lock().curves.clone()
    }

    /// Frames processed per second over the last window of about a second
    /// (none before the first window closed).
    pub fn frame_rate(&self) -> Option<f64> {
        self.lock().frame_rate
    }

    /// A copy of the history.
    pub fn history(&self) -> LatencyHistory {
        self.lock().history.clone()
    }
}

/// The quantiles the curves are sampled at (for the API's documentation).
pub fn curve_quantiles() -> &'static [f64] {
    &CURVE_QUANTILES
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{LatencyHistograms, RecentWindow, Segment, SegmentSpan};

    fn summary_of(values: &[u64]) -> Summary {
        let mut h = LatencyHistograms::new();
        for &ns in values {
            h.record_span(Segment::EndToEnd, SegmentSpan::Ns(ns));
        }
        Summary::of(&h)
    }

    #[test]
    fn history_keeps_each_window_once_for_five_minutes() {
        let mut history = LatencyHistory::default();
        let mut s = summary_of(&[10_000, 20_000, 30_000]);
        history.record(&s);
        assert!(history.is_empty(), "no window yet");
        let t0 = 1_000_000_000_000u64;
        let second = 1_000_000_000;
        for i in 1..=400 {
            s.recent = Some(RecentWindow {
                start_ns: t0 + (i - 1) * second,
                end_ns: t0 + i * second,
                frames: 3,
                segments: vec![(Segment::EndToEnd, 3, i as f64, 2.0 * i as f64)],
            });
            history.record(&s);
            history.record(&s);
        }
        assert_eq!(history.len(), HISTORY_SECONDS as usize + 1, "each window once, five minutes of them");
        let now = t0 + 400 * second;
        let series = history.series("end_to_end", now);
        assert_eq!(series.last().copied(), Some((0.0, 400.0, 800.0)));
        assert_eq!(series.first().map(|p| p.0), Some(-300.0));
        assert!(history.series("gpu", now).is_empty(), "no values, no series");
        let live = LiveLatency::default();
        assert_eq!(live.frame_rate(), None);
        live.publish(&s);
        assert_eq!(live.frame_rate(), Some(3.0), "3 frames in a second");
    }

    #[test]
    fn published_curves_follow_the_histograms() {
        let live = LiveLatency::default();
        let values: Vec<u64> = (1..=1000).map(|i| i * 1000).collect();
        live.publish(&summary_of(&values));
        let curves = live.curves();
        assert_eq!(curves.len(), 1);
        let c = &curves[0];
        assert_eq!((c.name.as_str(), c.count), ("end_to_end", 1000));
        let at = |q: f64| c.points.iter().find(|p| p.0 == q).unwrap().1;
        assert!((at(0.5) - 500.0).abs() < 1.0 && (at(0.99) - 990.0).abs() < 1.0, "{c:?}");
        assert!((at(1.0) - 1000.0).abs() < 1.0);
        assert!(c.points.windows(2).all(|w| w[0].1 <= w[1].1), "a percentile curve never falls");
    }
}
