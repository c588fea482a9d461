//! The latency summary: per-segment percentiles and frame counters, as a
//! fixed-width text table or JSON. Other parts of the appliance append their
//! own counter sections (ingest drops, sender counts) to the same report.

use super::histograms::{FrameCounters, LatencyHistograms, PercentileCurve, Percentiles};
use super::segment::Segment;
use serde::ser::{SerializeMap, Serializer};
use std::fmt::Write as _;

/// Percentiles and counts of one segment.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SegmentSummary {
    /// Which segment.
    pub segment: Segment,
    /// Values recorded.
    pub count: u64,
    /// Negative spans (clock skew) recorded as 0.
    pub negative_clamped: u64,
    /// Results where this segment could not be computed (an end never stamped).
    pub unstamped: u64,
    /// Its percentiles (flattened into the JSON object).
    #[serde(flatten)]
    pub percentiles: Percentiles,
    /// The percentile distribution (for plots; not in the JSON report).
    #[serde(skip)]
    pub curve: PercentileCurve,
}

/// A titled list of named counters, kept in insertion order; serialises as
/// a JSON object.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CounterSection {
    /// The section's title (its key in JSON).
    pub title: String,
    /// Counter names and values, in the order added.
    pub counters: Vec<(String, u64)>,
}

impl serde::Serialize for CounterSection {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.counters.len()))?;
        for (name, value) in &self.counters {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Everything the final report and the progress line print.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Summary {
    /// One entry per segment, in [`Segment::ALL`] order.
    pub segments: Vec<SegmentSummary>,
    /// Frames and results counted.
    pub frames: FrameCounters,
    /// Counter sections added by other parts of the appliance, keyed by title in JSON.
    #[serde(serialize_with = "serialize_sections")]
    pub sections: Vec<CounterSection>,
    /// The percentiles of the last completed window of about a second (the
    /// live view's recent history; not in the JSON report).
    #[serde(skip)]
    pub recent: Option<RecentWindow>,
}

/// p50 and p99 of each segment over one window of time.
#[derive(Debug, Clone, PartialEq)]
pub struct RecentWindow {
    /// CLOCK_REALTIME ns the window started at.
    pub start_ns: u64,
    /// CLOCK_REALTIME ns the window ended at.
    pub end_ns: u64,
    /// Frames processed in the window.
    pub frames: u64,
    /// (segment, values, p50 µs, p99 µs) of every segment with values.
    pub segments: Vec<(Segment, u64, f64, f64)>,
}

impl RecentWindow {
    /// The window of `h`, from `start_ns` to `end_ns`.
    pub fn of(h: &LatencyHistograms, start_ns: u64, end_ns: u64) -> Self {
        let segments = Segment::ALL
            .into_iter()
            .filter_map(|segment| {
                let hist = h.histogram(segment);
                if hist.is_empty() {
                    return None;
                }
                let mut at = hist.value_at_quantiles([0.5, 0.99]).map(|ns| ns as f64 / 1000.0);
                let (p50, p99) = (at.next().unwrap_or_default(), at.next().unwrap_or_default());
                Some((segment, hist.len(), p50, p99))
            })
            .collect();
        Self { start_ns, end_ns, frames: h.counters().processed, segments }
    }
}

fn serialize_sections<S: Serializer>(sections: &[CounterSection], serializer: S) -> Result<S::Ok, S::Error> {
    let mut map = serializer.serialize_map(Some(sections.len()))?;
    for s in sections {
        map.serialize_entry(&s.title, s)?;
    }
    map.end()
}

impl Summary {
    /// The summary of a set of histograms.
    pub fn of(h: &LatencyHistograms) -> Self {
        let segments = Segment::ALL
            .into_iter()
            .map(|segment| {
                let (percentiles, curve) = h.percentiles_and_curve(segment);
                SegmentSummary {
                    segment,
                    count: h.histogram(segment).len(),
                    negative_clamped: h.negative(segment),
                    unstamped: h.unstamped(segment),
                    percentiles,
                    curve,
                }
            })
            .collect();
        Self { segments, frames: *h.counters(), sections: Vec::new(), recent: None }
    }

    /// The entry of one segment.
    pub fn segment(&self, segment: Segment) -> &SegmentSummary {
        &self.segments[segment.index()]
    }

    /// Appends a counter section (for example `"ingest"` with its drop counts).
    pub fn add_counters<N: Into<String>>(
        &mut self,
        title: &str,
        counters: impl IntoIterator<Item = (N, u64)>,
    ) {
        self.sections.push(CounterSection {
            title: title.to_string(),
            counters: counters.into_iter().map(|(n, v)| (n.into(), v)).collect(),
        });
    }

    /// The latency table, the frame counters, then every added section.
    pub fn render_table(&self) -> String {
        let mut out = render_latency_table(&self.segments);
        out.push('\n');
        out.push_str(&render_counters("frames", &self.frames.rows()));
        for s in &self.sections {
            let rows: Vec<(&str, u64)> = s.counters.iter().map(|(n, v)| (n.as_str(), *v)).collect();
            out.push('\n');
            out.push_str(&render_counters(&s.title, &rows));
        }
        out
    }

    /// Pretty JSON of the whole summary.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary always serialises")
    }

    /// One line for a progress display: frames and end-to-end p50/p99.
    pub fn progress_line(&self) -> String {
        let e2e = self.segment(Segment::EndToEnd).percentiles;
        format!(
            "frames {} (incomplete {}, skipped {}, lost {})  end to end p50 {:.1} us  p99 {:.1} us  max {:.1} us",
            self.frames.processed,
            self.frames.incomplete,
            self.frames.skipped,
            self.frames.results_lost,
            e2e.p50_us,
            e2e.p99_us,
            e2e.max_us
        )
    }
}

/// Width of the name column in every table.
const NAME_WIDTH: usize = 20;
/// Width of each number column.
const NUMBER_WIDTH: usize = 11;

/// The latency table: one row per segment, columns p50 p90 p99 p99.9 max in
/// µs, then the count and the clamped negatives.
pub fn render_latency_table(segments: &[SegmentSummary]) -> String {
    let mut out = String::new();
    let _ = write!(out, "{:<NAME_WIDTH$}", "latency (us)");
    for head in ["p50", "p90", "p99", "p99.9", "max", "count", "negative"] {
        let _ = write!(out, "{head:>NUMBER_WIDTH$}");
    }
    out.push('\n');
    for s in segments {
        let p = s.percentiles;
        let _ = write!(out, "{:<NAME_WIDTH$}", s.segment.name());
        for v in [p.p50_us, p.p90_us, p.p99_us, p.p99_9_us, p.max_us] {
            let _ = write!(out, "{v:>NUMBER_WIDTH$.1}");
        }
        let _ = writeln!(out, "{:>NUMBER_WIDTH$}{:>NUMBER_WIDTH$}", s.count, s.negative_clamped);
    }
    out
}

/// A counter section: the title, then one indented `name value` row each,
/// the values in one column however long the names.
pub fn render_counters(title: &str, rows: &[(&str, u64)]) -> String {
    let mut out = format!("{title}\n");
    let w = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0).max(NAME_WIDTH - 2);
    for (name, value) in rows {
        let _ = writeln!(out, "  {name:<w$}{value:>NUMBER_WIDTH$}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::ResultRecord;
    use crate::ring::layout::SLOT_COMPLETE;

    fn summary() -> Summary {
        let mut h = LatencyHistograms::new();
        for i in 0..100u64 {
            let r = ResultRecord {
                sender_ts_ns: 1_000_000,
                first_rx_ns: 1_010_000,
                published_ns: 1_020_000,
                detect_ns: 1_021_000,
                done_ns: 1_031_000 + i * 100,
                slot_flags: SLOT_COMPLETE,
                ..Default::default()
            };
            h.record(&r, 1_100_000, 0);
        }
        h.add_results_lost(3);
        let mut s = Summary::of(&h);
        s.add_counters("ingest", [("packets", 400u64), ("dropped bad magic", 2)]);
        s
    }

    #[test]
    fn counter_values_share_one_column_however_long_the_names() {
        let text = render_counters(
            "ingest",
            &[("ok", 1), ("payload_outside_frame", 22), ("a_much_longer_counter_name", 333)],
        );
        let ends: Vec<usize> = text.lines().skip(1).map(str::len).collect();
        assert_eq!(ends.len(), 3);
        assert!(ends.iter().all(|&e| e == ends[0]), "{text}");
        assert!(text.lines().nth(2).unwrap().ends_with(" 22"), "{text}");
    }

    #[test]
    fn table_has_a_row_per_segment_and_every_section() {
        let text = summary().render_table();
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("latency (us)") && lines[0].contains("p99.9"));
        for (line, seg) in lines[1..=Segment::COUNT].iter().zip(Segment::ALL) {
            assert!(line.starts_with(seg.name()), "{line}");
            assert_eq!(line.len(), lines[0].len(), "fixed width: {line}");
        }
        // Wire is exactly 10 µs for every frame.
        assert!(lines[1].split_whitespace().nth(1) == Some("10.0"), "{}", lines[1]);
        assert!(text.contains("frames\n  processed") && text.contains("results lost"));
        assert!(text.contains("ingest\n  packets"));
        let dropped = text.lines().find(|l| l.contains("dropped bad magic")).unwrap();
        assert_eq!(dropped.split_whitespace().last(), Some("2"));
    }

    #[test]
    fn json_names_segments_counters_and_sections() {
        let s = summary();
        let v: serde_json::Value = serde_json::from_str(&s.to_json()).unwrap();
        assert_eq!(v["segments"][0]["segment"], "wire");
        assert_eq!(v["segments"][5]["segment"], "end_to_end");
        assert_eq!(v["segments"][0]["count"], 100);
        assert!((v["segments"][0]["p50_us"].as_f64().unwrap() - 10.0).abs() < 0.01);
        assert_eq!(v["frames"]["processed"], 100);
        assert_eq!(v["frames"]["results_lost"], 3);
        assert_eq!(v["sections"]["ingest"]["dropped bad magic"], 2);
        assert!(s.progress_line().starts_with("frames 100 "));
    }
}
