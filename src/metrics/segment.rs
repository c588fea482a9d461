//! Latency segments of one frame: the stretches between its timestamps,
//! which partition its end-to-end latency.

use crate::ring::ResultRecord;
use crate::ring::layout::RESULT_GPU_CLOCK;

/// One stretch of a frame's life. The first five partition [`Segment::EndToEnd`];
/// [`Segment::PublishToSeen`] sums three of them; [`Segment::LastRxToSeen`]
/// starts inside [`Segment::Assembly`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Segment {
    /// Sender timestamp to first packet received.
    Wire,
    /// First packet received to the frame published in the ring.
    Assembly,
    /// Published to noticed by the consumer.
    PublishToDetect,
    /// Noticed to chain finished.
    Compute,
    /// Chain finished to the result seen by the host result thread.
    DoneToSeen,
    /// Sender timestamp to the result seen by the host.
    EndToEnd,
    /// Published in the ring to the result seen by the host: the consumer's
    /// whole share (detect + compute + result delivery), the figure to set
    /// against host-published GPU benchmarks. Overlaps the segments above.
    PublishToSeen,
    /// Last packet received to the result seen by the host: what is left
    /// after the wire delivered the frame (assembly's end, the bus, compute
    /// and result delivery), the figure sub-frame streaming shortens.
    /// Overlaps the segments above.
    LastRxToSeen,
}

impl Segment {
    /// Every segment, in the order of a frame's life (end to end last).
    pub const ALL: [Segment; Segment::COUNT] = [
        Segment::Wire,
        Segment::Assembly,
        Segment::PublishToDetect,
        Segment::Compute,
        Segment::DoneToSeen,
        Segment::EndToEnd,
        Segment::PublishToSeen,
        Segment::LastRxToSeen,
    ];
    /// Number of segments.
    pub const COUNT: usize = 8;

    /// Stable name, used as the interval-log tag and the JSON key.
    pub fn name(self) -> &'static str {
        match self {
            Segment::Wire => "wire",
            Segment::Assembly => "assembly",
            Segment::PublishToDetect => "publish_to_detect",
            Segment::Compute => "compute",
            Segment::DoneToSeen => "done_to_seen",
            Segment::EndToEnd => "end_to_end",
            Segment::PublishToSeen => "publish_to_seen",
            Segment::LastRxToSeen => "last_rx_to_seen",
        }
    }

    /// Position in [`Segment::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }

    /// The segment whose [`Segment::name`] is `name`.
    pub fn from_name(name: &str) -> Option<Segment> {
        Segment::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// The length of one segment of one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentSpan {
    /// Both ends were stamped and in order.
    Ns(u64),
    /// The end came before the start (clocks of two boxes disagree); the
    /// span counts as 0 and the skew is counted.
    Negative,
    /// One end was never stamped (0), so the segment is not recorded.
    Unstamped,
}

fn span(start: u64, end: u64) -> SegmentSpan {
    if start == 0 || end == 0 {
        SegmentSpan::Unstamped
    } else if end >= start {
        SegmentSpan::Ns(end - start)
    } else {
        SegmentSpan::Negative
    }
}

/// Converts a consumer timestamp to the host clock: results flagged
/// `RESULT_GPU_CLOCK` carry GPU `%globaltimer` values.
pub(crate) fn to_host_clock(t: u64, gpu_clock: bool, clock_offset_ns: i64) -> u64 {
    if t == 0 || !gpu_clock { t } else { t.saturating_add_signed(clock_offset_ns) }
}

/// The spans of every segment of one result, indexed like [`Segment::ALL`].
/// `seen_ns` is when the host read the result; `clock_offset_ns` is the
/// loop's offset from its clock to the host clock.
pub fn segment_spans(r: &ResultRecord, seen_ns: u64, clock_offset_ns: i64) -> [SegmentSpan; Segment::COUNT] {
    let gpu = r.result_flags & RESULT_GPU_CLOCK != 0;
    let detect = to_host_clock(r.detect_ns, gpu, clock_offset_ns);
    let done = to_host_clock(r.done_ns, gpu, clock_offset_ns);
    [
        span(r.sender_ts_ns, r.first_rx_ns),
        span(r.first_rx_ns, r.published_ns),
        span(r.published_ns, detect),
        span(detect, done),
        span(done, seen_ns),
        span(r.sender_ts_ns, seen_ns),
        span(r.published_ns, seen_ns),
        span(r.last_rx_ns, seen_ns),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> ResultRecord {
        ResultRecord {
            sender_ts_ns: 1_000,
            first_rx_ns: 1_400,
            last_rx_ns: 1_900,
            published_ns: 2_000,
            detect_ns: 2_050,
            done_ns: 2_550,
            ..Default::default()
        }
    }

    #[test]
    fn segments_partition_end_to_end() {
        let spans = segment_spans(&record(), 3_000, 0);
        let ns: Vec<u64> = spans
            .iter()
            .map(|s| match s {
                SegmentSpan::Ns(v) => *v,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ns, vec![400, 600, 50, 500, 450, 2000, 1000, 1100]);
        assert_eq!(ns[..5].iter().sum::<u64>(), ns[5]);
    }

    #[test]
    fn gpu_clock_results_are_shifted_by_the_offset() {
        let r = ResultRecord { detect_ns: 50, done_ns: 550, result_flags: RESULT_GPU_CLOCK, ..record() };
        let spans = segment_spans(&r, 3_000, 2_000);
        assert_eq!(spans[Segment::PublishToDetect.index()], SegmentSpan::Ns(50));
        assert_eq!(spans[Segment::Compute.index()], SegmentSpan::Ns(500));
        assert_eq!(spans[Segment::DoneToSeen.index()], SegmentSpan::Ns(450));
        // Without the flag the same offset is ignored.
        let host = segment_spans(&record(), 3_000, 2_000);
        assert_eq!(host[Segment::PublishToDetect.index()], SegmentSpan::Ns(50));
    }

    #[test]
    fn skew_and_missing_stamps_are_reported_not_computed() {
        let r = ResultRecord { sender_ts_ns: 1_500, first_rx_ns: 1_400, ..record() };
        let spans = segment_spans(&r, 3_000, 0);
        assert_eq!(spans[Segment::Wire.index()], SegmentSpan::Negative);
        let r = ResultRecord { sender_ts_ns: 0, ..record() };
        let spans = segment_spans(&r, 3_000, 0);
        assert_eq!(spans[Segment::Wire.index()], SegmentSpan::Unstamped);
        assert_eq!(spans[Segment::EndToEnd.index()], SegmentSpan::Unstamped);
        assert_eq!(spans[Segment::Assembly.index()], SegmentSpan::Ns(600));
    }

    #[test]
    fn names_are_stable_and_round_trip() {
        let names: Vec<&str> = Segment::ALL.iter().map(|s| s.name()).collect();
        assert_eq!(
            names,
            [
                "wire",
                "assembly",
                "publish_to_detect",
                "compute",
                "done_to_seen",
                "end_to_end",
                "publish_to_seen",
                "last_rx_to_seen"
            ]
        );
        for s in Segment::ALL {
            assert_eq!(Segment::from_name(s.name()), Some(s));
            assert_eq!(Segment::ALL[s.index()], s);
        }
    }
}
