//! Assembly of RFC 4175 packets into frame-ring slots: a pure state machine
//! (no I/O, no clock reads; every time is an argument) with the same shape
//! as the native reassembler, so a receiver can drive either.
//!
//! Rules, in the order they are applied to a datagram:
//! 1. It is parsed ([`rtp4175::parse`]); a rejection is counted by kind.
//! 2. A payload type other than the configured one is `wrong_payload_type`.
//!    The first SSRC seen is locked; others are `other_ssrc` until the locked
//!    one has been silent for two frame timeouts.
//! 3. Its extended sequence number ([`SeqTracker`]) drops `duplicate` and
//!    `stale_seq` packets; forward gaps add to `seq_gap_packets`.
//! 4. The RTP timestamp names the frame. A newer timestamp (or any
//!    timestamp on an in-order packet after a sender restart) publishes the
//!    frame in progress and starts a new one in a freshly reserved,
//!    zeroed slot (`frames_ring_full` when the ring has no free slot: the
//!    frame's packets are then `dropped_frame_packets`). A reordered packet
//!    of any other frame is `late`.
//! 5. Every segment is checked against the geometry before any byte is
//!    written ([`VideoGeometry::segment_range`]); one bad segment drops the
//!    whole packet, counted by the fault. Writes therefore stay inside
//!    `[0, frame_bytes)`, and `frame_bytes <= slot capacity` (checked at
//!    construction).
//! 6. A frame is complete when its marker packet has been seen, every
//!    sequence number from its lowest one to the marker's has arrived (no
//!    gap), and its segments cover `frame_bytes` (so a lost first packet is
//!    noticed too); it is then published at once (`SLOT_COMPLETE`).
//!    Packets may arrive in any order within a frame. Otherwise it is
//!    published `SLOT_INCOMPLETE` (missing bytes zero) when the next frame
//!    starts, `frame_timeout` after its first packet (`SLOT_TIMED_OUT` too),
//!    or on [`RtpAssembler::flush`].
//!
//! Slot headers: `frame_seq` is the RTP timestamp extended to 64 bits (RTP
//! carries no frame counter), `sender_ts_ns` is 0 (RTP carries no sender
//! wall clock), `packets_expected` is the count from the lowest sequence
//! number received to the marker's (packets received when the marker is lost).

use super::config::RtpSettings;
use super::counters::{RtpCounter, RtpCounters, parse_error_counter};
use super::geometry::{SegmentFault, VideoGeometry};
use super::sequence::{SeqTracker, SeqVerdict};
use crate::ingest::FrameAssembler;
use crate::ring::RingWriter;
use crate::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_TIMED_OUT, SlotHeader};
use crate::wire::rtp4175::{self, RawVideoPacket};
use std::sync::Arc;
use thiserror::Error;

/// The assembler cannot run with this ring and geometry.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum AssemblerError {
    /// A frame larger than a ring slot; set `ring.slot_bytes` to at least the size named.
    #[error(
        "a {width}x{height} frame needs {needed} bytes but a ring slot holds {capacity}; set ring.slot_bytes to at least {needed}"
    )]
    SlotTooSmall { width: u32, height: u32, needed: usize, capacity: usize },
}

/// The frame being assembled.
#[derive(Debug)]
struct Frame {
    rtp_ts: u32,
    /// RTP timestamp extended to 64 bits.
    frame_seq: u64,
    /// Reserved slot, or `None` when the frame is dropped (ring full).
    ring_seq: Option<u64>,
    first_rx_ns: u64,
    last_rx_ns: u64,
    /// Packets written into the frame.
    received: u32,
    /// Bytes written (segments of distinct packets).
    covered: usize,
    /// Lowest extended sequence number of the frame's packets.
    lowest_seq: u32,
    /// Sequence number of the marker packet, once seen.
    marker_seq: Option<u32>,
}

impl Frame {
    /// Packets the sequence numbers say the frame has, when the marker was seen.
    fn expected(&self) -> Option<u32> {
        let m = self.marker_seq?;
        Some(m.wrapping_sub(self.lowest_seq).wrapping_add(1))
    }

    fn complete(&self, frame_bytes: usize) -> bool {
        self.expected() == Some(self.received) && self.covered >= frame_bytes
    }
}

/// Assembles RFC 4175 datagrams into frame-ring slots.
pub struct RtpAssembler {
    geometry: VideoGeometry,
    payload_type: Option<u8>,
    stream_id: u32,
    timeout_ns: u64,
    writer: RingWriter,
    counters: Arc<RtpCounters>,
    seq: SeqTracker,
    /// Locked SSRC and the time of its newest packet.
    ssrc: Option<(u32, u64)>,
    frame: Option<Frame>,
    /// Timestamp of the newest frame finished (published or dropped), for `late`.
    last_done_ts: Option<u32>,
    /// Newest RTP timestamp and its 64-bit extension.
    ts_ext: Option<(u32, u64)>,
}

impl RtpAssembler {
    /// An assembler writing frames of `settings.geometry` into `writer`'s ring.
    pub fn new(settings: RtpSettings, writer: RingWriter) -> Result<Self, AssemblerError> {
        let g = settings.geometry;
        let capacity = writer.ring().payload_capacity();
        if g.frame_bytes() > capacity {
            return Err(AssemblerError::SlotTooSmall {
                width: g.width,
                height: g.height,
                needed: g.frame_bytes(),
                capacity,
            });
        }
        Ok(Self {
            geometry: g,
            payload_type: settings.payload_type,
            stream_id: settings.stream_id,
            timeout_ns: settings.frame_timeout_ns.max(1),
            writer,
            counters: Arc::default(),
            seq: SeqTracker::default(),
            ssrc: None,
            frame: None,
            last_done_ts: None,
            ts_ext: None,
        })
    }

    /// The counters this assembler updates.
    pub fn counters(&self) -> &Arc<RtpCounters> {
        &self.counters
    }

    /// The geometry frames are assembled to.
    pub fn geometry(&self) -> &VideoGeometry {
        &self.geometry
    }

    /// Handles one datagram received at `rx_ns`, also taken as the current time.
    /// As [`RtpAssembler::on_datagram`]; RTP frames are published at their
    /// receive time.
    pub fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, _now_ns: u64) {
        self.on_datagram(datagram, rx_ns)
    }

    pub fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        self.counters.bump(RtpCounter::datagrams);
        self.counters.add(RtpCounter::datagram_bytes, datagram.len() as u64);
        match rtp4175::parse(datagram) {
            Ok(p) => self.on_packet(&p, rx_ns),
            Err(e) => self.counters.bump(parse_error_counter(&e)),
        }
        self.on_tick_behind(rx_ns, rx_ns);
    }

    /// The tick of a receiver with datagrams still waiting: publishes the
    /// frame in progress at `now_ns` if it went stale by `stale_at` (the
    /// arrival time of the latest datagram handled), so none is timed out
    /// while packets of it that arrived in time wait in the socket.
    pub fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        if let Some(f) = &self.frame
            && stale_at.min(now_ns).saturating_sub(f.first_rx_ns) >= self.timeout_ns
        {
            self.finish(now_ns, true);
        }
    }

    /// Publishes the frame in progress (incomplete if it is) at `now_ns`.
    pub fn flush(&mut self, now_ns: u64) {
        if self.frame.is_some() {
            self.finish(now_ns, false);
        }
    }

    fn on_packet(&mut self, p: &RawVideoPacket<'_>, rx_ns: u64) {
        let h = p.header;
        if self.payload_type.is_some_and(|pt| pt != h.payload_type) {
            return self.counters.bump(RtpCounter::wrong_payload_type);
        }
        match self.ssrc {
            Some((s, _)) if s == h.ssrc => {}
            Some((_, last)) if rx_ns.saturating_sub(last) < 2 * self.timeout_ns => {
                return self.counters.bump(RtpCounter::other_ssrc);
            }
            Some(_) => {
                // The locked sender went silent: follow the new one.
                self.flush(rx_ns);
                self.seq.reset();
                self.last_done_ts = None;
                self.ts_ext = None;
            }
            None => {}
        }
        self.ssrc = Some((h.ssrc, rx_ns));
        let s = self.seq.extend(h.seq, p.ext_seq_high);
        let verdict = self.seq.observe(s);
        match verdict {
            SeqVerdict::Duplicate => return self.counters.bump(RtpCounter::duplicate),
            SeqVerdict::Stale => return self.counters.bump(RtpCounter::stale_seq),
            SeqVerdict::Newer { gap } => self.counters.add(RtpCounter::seq_gap_packets, gap as u64),
            SeqVerdict::Reordered => self.counters.bump(RtpCounter::reordered),
            SeqVerdict::Restart if self.frame.is_some() || self.last_done_ts.is_some() => {
                self.counters.bump(RtpCounter::seq_resync)
            }
            SeqVerdict::Restart => {}
        }
        let current = self.frame.as_ref().map(|f| f.rtp_ts);
        if current != Some(h.timestamp) {
            // Only an in-order packet starts a frame; a reordered one of
            // another frame, or one of the frame just finished, is late.
            let reordered = verdict == SeqVerdict::Reordered;
            let just_finished = current.is_none() && self.last_done_ts == Some(h.timestamp);
            if reordered || (just_finished && verdict != SeqVerdict::Restart) {
                return self.counters.bump(RtpCounter::late);
            }
            if self.frame.is_some() {
                self.finish(rx_ns, false);
            }
            self.start_frame(h.timestamp, s, rx_ns);
        }
        self.write_packet(p, s, rx_ns);
    }

    fn extend_ts(&mut self, ts: u32) -> u64 {
        let ext = match self.ts_ext {
            None => ts as u64,
            Some((last, last_ext)) => last_ext.wrapping_add_signed(ts.wrapping_sub(last) as i32 as i64),
        };
        self.ts_ext = Some((ts, ext));
        ext
    }

    fn start_frame(&mut self, rtp_ts: u32, s: u32, rx_ns: u64) {
        let frame_seq = self.extend_ts(rtp_ts);
        let ring_seq = match self.writer.reserve() {
            Ok(seq) => {
                self.writer.payload_mut(seq)[..self.geometry.frame_bytes()].fill(0);
                Some(seq)
            }
            Err(_) => {
                self.counters.bump(RtpCounter::frames_ring_full);
                None
            }
        };
        self.frame = Some(Frame {
            rtp_ts,
            frame_seq,
            ring_seq,
            first_rx_ns: rx_ns,
            last_rx_ns: rx_ns,
            received: 0,
            covered: 0,
            lowest_seq: s,
            marker_seq: None,
        });
    }

    fn write_packet(&mut self, p: &RawVideoPacket<'_>, s: u32, rx_ns: u64) {
        let g = self.geometry;
        let Some(f) = self.frame.as_mut() else { return };
        let Some(ring_seq) = f.ring_seq else {
            return self.counters.bump(RtpCounter::dropped_frame_packets);
        };
        for seg in p.segments() {
            if seg.field {
                return self.counters.bump(RtpCounter::field_unsupported);
            }
            if let Err(fault) = g.segment_range(seg.line, seg.offset, seg.data.len()) {
                return self.counters.bump(match fault {
                    SegmentFault::LineOutsideFrame => RtpCounter::line_outside_frame,
                    SegmentFault::NotPgroupAligned => RtpCounter::not_pgroup_aligned,
                    SegmentFault::PastLineEnd => RtpCounter::past_line_end,
                });
            }
        }
        let slot = &mut self.writer.payload_mut(ring_seq)[..g.frame_bytes()];
        for seg in p.segments() {
            if let Ok(r) = g.segment_range(seg.line, seg.offset, seg.data.len()) {
                f.covered += r.len();
                slot[r].copy_from_slice(seg.data);
            }
        }
        self.counters.bump(RtpCounter::packets_accepted);
        f.received += 1;
        f.last_rx_ns = f.last_rx_ns.max(rx_ns);
        if (s.wrapping_sub(f.lowest_seq) as i32) < 0 {
            f.lowest_seq = s;
        }
        if p.header.marker {
            f.marker_seq = Some(s);
        }
        if f.complete(g.frame_bytes()) {
            self.finish(rx_ns, false);
        }
    }

    /// Publishes (or, when it had no slot, forgets) the frame in progress.
    fn finish(&mut self, now_ns: u64, timed_out: bool) {
        let Some(f) = self.frame.take() else { return };
        self.last_done_ts = Some(f.rtp_ts);
        let Some(ring_seq) = f.ring_seq else { return };
        let frame_bytes = self.geometry.frame_bytes();
        let complete = f.complete(frame_bytes);
        let flags = if complete {
            self.counters.bump(RtpCounter::frames_complete);
            SLOT_COMPLETE
        } else {
            self.counters.bump(RtpCounter::frames_incomplete);
            if timed_out {
                self.counters.bump(RtpCounter::frames_timed_out);
                SLOT_INCOMPLETE | SLOT_TIMED_OUT
            } else {
                SLOT_INCOMPLETE
            }
        };
        let header = SlotHeader {
            frame_seq: f.frame_seq,
            stream_id: self.stream_id,
            flags,
            payload_len: frame_bytes as u32,
            packets_expected: f.expected().unwrap_or(f.received).max(f.received),
            packets_received: f.received,
            first_rx_ns: f.first_rx_ns,
            last_rx_ns: f.last_rx_ns,
            published_ns: now_ns,
            ..SlotHeader::default()
        };
        self.writer.publish(ring_seq, &header);
    }
}

/// The RTP assembler as a receiver's assembler: it plans no one-copy
/// landing, so every datagram is copied through its inherent methods.
impl FrameAssembler for RtpAssembler {
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        RtpAssembler::on_datagram(self, datagram, rx_ns)
    }
    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        RtpAssembler::on_datagram_at(self, datagram, rx_ns, now_ns)
    }
    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        RtpAssembler::on_tick_behind(self, stale_at, now_ns)
    }
    fn flush(&mut self, now_ns: u64) {
        RtpAssembler::flush(self, now_ns)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::assembler::tests::{drive, ring};
    use crate::ring::layout::SLOT_COMPLETE;
    use crate::rtp::{Packetizer, RtpConfig, Sampling};

    #[test]
    fn rtp_assembler_through_the_trait() {
        let settings = RtpConfig::inline(Sampling::Ycbcr422, 8, 8, 2).resolve().unwrap();
        let bytes = settings.geometry.frame_bytes();
        let r = ring(bytes);
        let mut reader = r.reader().unwrap();
        let mut a = RtpAssembler::new(settings, r.writer().unwrap()).unwrap();
        let frame: Vec<u8> = (0..bytes).map(|i| i as u8 ^ 0x5a).collect();
        let packets = Packetizer::new(settings.geometry, 40).packetize(&frame, 9000);
        assert!(packets.len() > 1);
        let out = drive(&mut a, &mut reader, &packets);
        assert_eq!(out, vec![(SLOT_COMPLETE, frame)]);
    }
}
