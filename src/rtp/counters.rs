//! Counters of RTP raw video assembly: traffic, frames by outcome, and every
//! dropped packet by reason. Shared through `Arc` with metrics; each counter
//! has a single writer (the assembler), so relaxed updates are exact.

use crate::wire::rtp4175::RtpParseError;
use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! rtp_counters {
    ($( $(#[$doc:meta])* $name:ident ),+ $(,)?) => {
        /// One RTP assembly counter.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(non_camel_case_types)]
        pub enum RtpCounter { $( $(#[$doc])* $name, )+ }

        impl RtpCounter {
            /// Every counter in declaration order.
            pub const ALL: &[RtpCounter] = &[ $( RtpCounter::$name, )+ ];

            /// Stable counter name (metrics label, summary line).
            pub fn name(self) -> &'static str {
                match self { $( RtpCounter::$name => stringify!($name), )+ }
            }
        }
    };
}

rtp_counters! {
    /// Datagrams handed to the assembler.
    datagrams,
    /// Bytes of those datagrams.
    datagram_bytes,
    /// Packets whose segments were written into a frame.
    packets_accepted,
    /// Frames published with every byte present.
    frames_complete,
    /// Frames published with bytes missing (zeroed).
    frames_incomplete,
    /// Of the incomplete frames, those published because they went stale.
    frames_timed_out,
    /// Frames dropped whole because the frame ring was full.
    frames_ring_full,
    /// Packets the sequence numbers say were skipped when first noticed.
    seq_gap_packets,
    /// Packets that arrived after a later sequence number (they fill a gap).
    reordered,
    /// Times the sequence tracking restarted after a large jump.
    seq_resync,
    rtp_short_header,
    rtp_bad_version,
    rtp_truncated_header,
    rtp_bad_padding,
    rtp_short_payload,
    rtp_unterminated_line_headers,
    rtp_truncated_segments,
    /// Payload type other than the configured one.
    wrong_payload_type,
    /// SSRC other than the stream being assembled.
    other_ssrc,
    /// Sequence number already received.
    duplicate,
    /// Sequence number far behind the newest (older than the reorder window).
    stale_seq,
    /// Packet of a frame already published.
    late,
    /// Packet of a frame dropped whole (ring full).
    dropped_frame_packets,
    /// Segment with the field bit set (interlaced video is not assembled).
    field_unsupported,
    /// Segment whose line number is at or past the frame height.
    line_outside_frame,
    /// Segment offset or length not a whole number of pixel groups.
    not_pgroup_aligned,
    /// Segment running past the end of its line.
    past_line_end,
}

/// The counter values, indexed by [`RtpCounter`].
#[derive(Debug, Default)]
pub struct RtpCounters {
    values: [AtomicU64; RtpCounter::ALL.len()],
}

impl RtpCounters {
    /// Current value of one counter.
    pub fn get(&self, c: RtpCounter) -> u64 {
        self.values[c as usize].load(Ordering::Relaxed)
    }

    /// Adds `n` (single writer: a load and a store, never a lost update).
    pub fn add(&self, c: RtpCounter, n: u64) {
        let v = &self.values[c as usize];
        v.store(v.load(Ordering::Relaxed) + n, Ordering::Relaxed);
    }

    /// Adds one.
    pub fn bump(&self, c: RtpCounter) {
        self.add(c, 1);
    }

    /// Every counter with its name.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        RtpCounter::ALL.iter().map(|c| (c.name(), self.get(*c)))
    }

    /// Packets dropped for any reason (parse errors, filters, bad segments, ...).
    pub fn packets_dropped(&self) -> u64 {
        let first = RtpCounter::rtp_short_header as usize;
        RtpCounter::ALL[first..].iter().map(|c| self.get(*c)).sum()
    }

    /// Frames published (complete or not).
    pub fn frames_published(&self) -> u64 {
        self.get(RtpCounter::frames_complete) + self.get(RtpCounter::frames_incomplete)
    }
}

/// The counter of a parse rejection.
pub fn parse_error_counter(e: &RtpParseError) -> RtpCounter {
    match e {
        RtpParseError::ShortHeader { .. } => RtpCounter::rtp_short_header,
        RtpParseError::BadVersion { .. } => RtpCounter::rtp_bad_version,
        RtpParseError::TruncatedHeader { .. } => RtpCounter::rtp_truncated_header,
        RtpParseError::BadPadding { .. } => RtpCounter::rtp_bad_padding,
        RtpParseError::ShortPayload { .. } => RtpCounter::rtp_short_payload,
        RtpParseError::UnterminatedLineHeaders => RtpCounter::rtp_unterminated_line_headers,
        RtpParseError::TruncatedSegments { .. } => RtpCounter::rtp_truncated_segments,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_error_counters_carry_the_parser_kind_names() {
        let errors = [
            RtpParseError::ShortHeader { len: 0 },
            RtpParseError::BadVersion { found: 0 },
            RtpParseError::TruncatedHeader { csrc: 0, needed: 0, len: 0 },
            RtpParseError::BadPadding { count: 0, available: 0 },
            RtpParseError::ShortPayload { len: 0 },
            RtpParseError::UnterminatedLineHeaders,
            RtpParseError::TruncatedSegments { announced: 0, available: 0 },
        ];
        for e in errors {
            assert_eq!(parse_error_counter(&e).name(), e.kind());
        }
    }

    #[test]
    fn dropped_sums_only_drop_reasons() {
        let c = RtpCounters::default();
        c.add(RtpCounter::datagrams, 10);
        c.bump(RtpCounter::frames_complete);
        c.bump(RtpCounter::duplicate);
        c.add(RtpCounter::past_line_end, 2);
        assert_eq!(c.packets_dropped(), 3);
        assert_eq!(c.frames_published(), 1);
        assert_eq!(c.iter().count(), RtpCounter::ALL.len());
    }
}
