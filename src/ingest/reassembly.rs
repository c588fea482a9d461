//! Reassembly of native datagrams into frame-ring slots: a pure state
//! machine with no I/O and no clock reads (every time is an argument).
//!
//! Rules, in the order they are applied to a datagram:
//! 1. It is parsed ([`native::parse`]); a rejection is counted under its
//!    [`native::ParseError::kind`] and dropped.
//! 2. Frames are keyed on `(stream_id, frame_seq)`. A packet of a frame in
//!    flight must agree with the frame's first packet on `packet_count`
//!    (`packet_count_mismatch`) and `frame_len` (`frame_len_mismatch`), lie
//!    on the frame's regular cut (`layout_mismatch`, below) and carry an index
//!    not yet received (`duplicate`); otherwise it is dropped.
//! 3. A packet of a frame published a short while ago is `late`; one of a
//!    frame dropped whole is counted in `dropped_frame_packets`. The last
//!    [`RECENT_FRAMES`] finished keys are remembered (direct-mapped, so a
//!    much older straggler may start a new frame that then times out).
//! 4. The first valid packet of a new frame must have
//!    `packet_count <= max(frame_len, 1)` and `<= max_packets_per_frame`
//!    (`bad_packet_count`: bounds the packet bitmap) and lie on a regular cut;
//!    a frame longer than the slot payload capacity is dropped whole
//!    (`frame_too_large`, once per frame). If `max_frames_in_flight` frames
//!    are already in flight, the oldest is published first (incomplete). Then
//!    a slot is reserved; if the ring is full the frame is dropped whole
//!    (`ring_full`, once per frame).
//! 5. The payload is copied straight into the slot at `payload_offset`. The
//!    regular cut makes packets disjoint and their union exactly
//!    `[0, frame_len)`, and `frame_len <= capacity`, so no write leaves the
//!    slot whatever a packet says. With one-copy receive
//!    ([`Reassembler::plan_landing`], [`super::landing`]) the kernel may
//!    already have put it there; a payload that landed elsewhere is moved,
//!    and an unhandled one is moved out of the way of every write.
//! 6. Publishing is in ring order: whenever the oldest frame in flight is
//!    complete it is published (`SLOT_COMPLETE`), then any following complete
//!    ones. An incomplete oldest frame is published with `SLOT_INCOMPLETE` and
//!    its missing byte ranges zeroed when it goes stale (`frame_timeout_ms`
//!    after its first packet arrived, by the arrival time of the datagram
//!    being handled, or by the clock on a tick once the socket is empty, so
//!    a receiver running behind never times out packets that arrived in
//!    time; also `SLOT_TIMED_OUT`), when a new frame needs room (rule 4), or
//!    on [`Reassembler::flush`].
//!
//! Progress while a frame arrives: whenever the run of packets received
//! from index 0 grows, the slot header's `received_mark` is stored (release)
//! with the bytes of that run, so a consumer may copy them early (the GPU's
//! sub-frame streaming). The mark never passes a missing packet, never
//! exceeds `frame_len`, only grows, and the bytes under it are never written
//! again (later packets and the zeroing of rule 6 lie above it); a published
//! header carries the last mark stored.
//!
//! 7. A stream restart (a rebooted sender): when a packet that would start a
//!    new frame (it passes the checks of rule 4 up to the frame length) carries
//!    a `frame_seq` more than `restart_window` frames before or after its
//!    stream's high-water mark (the highest sequence of a frame that fit),
//!    the stream restarted: `stream_restarts` counts it, a warning is logged,
//!    the frames in flight up to the stream's last one are published
//!    (incomplete ones flagged, ring order kept), the stream's remembered
//!    finished keys are forgotten and its high-water mark becomes the new
//!    sequence. Reordering and duplicates inside the window are rules 2-3.
//!    The first [`TRACKED_STREAMS`] streams seen are tracked.
//!
//! The regular cut: every packet but the last carries `stride` bytes at
//! `packet_index * stride`, the last carries the rest up to `frame_len`, and
//! `packet_count == ceil(frame_len / stride)` (see
//! [`native::packet_span`]); any one packet fixes `stride`.

use super::config::ReassemblyConfig;
use super::counters::{IngestCounters, PendingCounts};
use super::history::{FrameKey, HighWaterMarks, Outcome, RecentFrames};
use super::landing::{GROUP_BYTES, Landed, LandingPlan, LandingShape, LandingTarget};
use crate::ring::RingWriter;
use crate::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SLOT_TIMED_OUT, SlotHeader, received_mark};
use crate::ring::prefetch::prefetch_for_write;
use crate::wire::native::{self, NativeHeader};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

pub use super::history::{RECENT_FRAMES, TRACKED_STREAMS};

/// One frame being assembled in a reserved slot.
struct Frame {
    key: FrameKey,
    ring_seq: u64,
    packet_count: u32,
    frame_len: u32,
    /// Payload bytes of every packet but the last. Invariant: `stride > 0` and
    /// `frame_len.div_ceil(stride) == packet_count` (or `packet_count == 1`).
    stride: u32,
    /// Packets received. Invariant: equals the number of bits set in `seen`.
    received: u32,
    /// Packets `0..prefix` all received (the run the received mark reports).
    /// Invariant: bit `prefix` of `seen` is clear, or `prefix == packet_count`.
    prefix: u32,
    first_rx_ns: u64,
    last_rx_ns: u64,
    sender_ts_ns: u64,
    /// One bit per packet index; `packet_count.div_ceil(64)` words.
    seen: Vec<u64>,
}

impl Frame {
    fn complete(&self) -> bool {
        self.received == self.packet_count
    }

    /// Whether `h`, a packet of this frame's count and length, has the
    /// offset and length its index has in this frame's cut: the same answer
    /// as `implied_stride(h) == Some(self.stride)`, without a division.
    fn fits_cut(&self, h: &NativeHeader) -> bool {
        let offset = u64::from(h.packet_index) * u64::from(self.stride);
        let len = if h.packet_index + 1 < self.packet_count {
            u64::from(self.stride)
        } else {
            u64::from(self.frame_len).saturating_sub(offset)
        };
        u64::from(h.payload_offset) == offset && u64::from(h.payload_len) == len
    }

    /// Bytes of the packets `0..prefix`: the received prefix of the payload.
    fn prefix_bytes(&self) -> u32 {
        (u64::from(self.prefix) * u64::from(self.stride)).min(u64::from(self.frame_len)) as u32
    }

    /// Extends `prefix` over the packets received from it on; true if it grew.
    fn extend_prefix(&mut self) -> bool {
        let before = self.prefix;
        while self.prefix < self.packet_count
            && self.seen[self.prefix as usize / 64] & (1 << (self.prefix % 64)) != 0
        {
            self.prefix += 1;
        }
        self.prefix != before
    }
}

/// Bytes ahead of a copied payload whose cache lines are requested before
/// the next datagrams of the frame arrive (about three 1,472-byte payloads,
/// one of 8,972 bytes). A slot of a large ring is rarely still in the CPU's
/// cache, and a short copy into it otherwise waits for each line in turn:
/// at 1,472-byte datagrams into a 16 MiB ring the copy took 123-134 ns per
/// datagram without the hint and 46-63 with it (`bench/ingest_profile.sh`,
/// see docs/decisions.md, "Ingest").
const PREFETCH_AHEAD_BYTES: usize = 4096;

/// The slot bytes to prefetch after copying a payload to `range`: the
/// whole window ahead for the frame's first payload, else only the part
/// the previous payload's window did not cover (when packets arrive in
/// order; otherwise the hint is merely less useful).
fn prefetch_window(range: &std::ops::Range<usize>) -> std::ops::Range<usize> {
    let len = range.len().max(1);
    let ahead = PREFETCH_AHEAD_BYTES.div_ceil(len) * len;
    let start = if range.start == 0 { range.end } else { range.end + ahead - len };
    start..range.end + ahead
}

/// The regular cut's stride implied by one packet, or `None` when the packet
/// cannot belong to a regular cut (see the module doc).
fn implied_stride(h: &NativeHeader) -> Option<u32> {
    let n = h.packet_count as u64;
    let i = h.packet_index as u64;
    let off = h.payload_offset as u64;
    let len = h.payload_len as u64;
    let flen = h.frame_len as u64;
    if n == 1 {
        return (off == 0 && len == flen).then_some(h.frame_len.max(1));
    }
    let stride = if i + 1 < n {
        if len == 0 || off != i * len {
            return None;
        }
        len
    } else {
        if off + len != flen || !off.is_multiple_of(i) {
            return None;
        }
        off / i
    };
    (stride > 0 && flen.div_ceil(stride) == n).then_some(stride as u32)
}

/// Where a packet's payload is.
#[derive(Clone, Copy)]
enum Payload<'a> {
    /// In the receive buffer.
    Bytes(&'a [u8]),
    /// Where one-copy receive target `k` of the landing plan put it.
    Landed(usize),
}

/// The last accepted packet's frame: where prediction for one-copy receive
/// starts (its next packet, then the stream's next frames, same cut).
#[derive(Clone, Copy, Debug)]
struct Cursor {
    key: FrameKey,
    next_index: u32,
    packet_count: u32,
    frame_len: u32,
    stride: u32,
}

/// Slots reserved ahead for frames not started yet, at most (and at most a
/// quarter of the ring).
const MAX_SPARE_SLOTS: usize = 32;

/// Assembles datagrams into frame-ring slots and publishes them in order.
pub struct Reassembler {
    timeout_ns: u64,
    max_in_flight: usize,
    max_packets: u32,
    restart_window: u64,
    writer: RingWriter,
    /// Payload capacity of one slot (cached from the ring).
    capacity: usize,
    counters: Arc<IngestCounters>,
    /// Counts raised since the last flush into `counters`: zero whenever no
    /// call into the reassembler runs.
    pending: PendingCounts,
    /// Frames in ring order. Invariant: their `ring_seq`s are consecutive and
    /// the front's is the writer's next sequence to publish.
    in_flight: VecDeque<Frame>,
    /// Bitmaps of finished frames, reused so that steady state never allocates.
    spare_bitmaps: Vec<Vec<u64>>,
    recent: RecentFrames,
    high_water: HighWaterMarks,
    /// Slots reserved (in order, after every frame in flight) for frames not
    /// started yet; the next new frame takes the first.
    spares: VecDeque<u64>,
    max_spares: usize,
    cursor: Option<Cursor>,
    /// The current batch's one-copy receive targets.
    landing: LandingPlan,
}

impl Reassembler {
    /// A reassembler writing into `writer`'s ring and counting into `counters`.
    /// `cfg` should have passed [`ReassemblyConfig::validate`]; values are
    /// clamped to at least 1 anyway.
    pub fn new(cfg: ReassemblyConfig, writer: RingWriter, counters: Arc<IngestCounters>) -> Self {
        let max_in_flight = cfg.max_frames_in_flight.max(1);
        let writer_slots = writer.ring().slot_count();
        Self {
            timeout_ns: cfg.frame_timeout_ms.max(1).saturating_mul(1_000_000),
            max_in_flight,
            max_packets: cfg.max_packets_per_frame.max(1),
            restart_window: cfg.restart_window.max(1),
            capacity: writer.ring().payload_capacity(),
            writer,
            counters,
            pending: PendingCounts::default(),
            in_flight: VecDeque::with_capacity(max_in_flight),
            spare_bitmaps: (0..max_in_flight).map(|_| Vec::new()).collect(),
            recent: RecentFrames::new(),
            high_water: HighWaterMarks::new(),
            spares: VecDeque::with_capacity(MAX_SPARE_SLOTS),
            max_spares: MAX_SPARE_SLOTS.min(writer_slots / 4),
            cursor: None,
            landing: LandingPlan::default(),
        }
    }

    /// The counters this reassembler updates.
    pub fn counters(&self) -> &Arc<IngestCounters> {
        &self.counters
    }

    /// Frames currently being assembled.
    pub fn frames_in_flight(&self) -> usize {
        self.in_flight.len()
    }

    /// Handles one datagram received at `rx_ns` (CLOCK_REALTIME ns), which is
    /// also taken as the current time for timeouts.
    pub fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        self.on_datagram_at(datagram, rx_ns, rx_ns)
    }

    /// As [`Reassembler::on_datagram`] for a datagram received at `rx_ns` and
    /// handled at `now_ns` (`>= rx_ns`): completed frames are published at
    /// `now_ns`, so the receiver's own wake-up shows in the assembly segment.
    /// Whether a frame is stale is judged at `rx_ns`: a receiver running
    /// behind its socket must not time out a frame whose packets arrived in
    /// time and are still queued behind this one.
    pub fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        self.handle_datagram(datagram, rx_ns, now_ns);
        self.pending.flush_into(&self.counters);
    }

    /// As [`Reassembler::on_datagram_at`] for each of `datagrams` (the
    /// datagrams of one receive buffer), with the counts every datagram
    /// raises added to the shared counters once at the end (and before each
    /// publication) instead of once per datagram.
    pub fn on_datagrams_at<'a>(
        &mut self,
        datagrams: impl IntoIterator<Item = &'a [u8]>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        for datagram in datagrams {
            self.handle_datagram(datagram, rx_ns, now_ns);
        }
        self.pending.flush_into(&self.counters);
    }

    fn handle_datagram(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        debug_assert!(now_ns >= rx_ns);
        self.pending.datagram(datagram.len());
        match native::parse(datagram) {
            Ok((h, payload)) => self.on_packet(&h, Payload::Bytes(payload), rx_ns, now_ns),
            Err(e) => IngestCounters::bump(self.counters.parse_error(&e)),
        }
        self.publish_ready(rx_ns, now_ns);
    }

    /// Plans one-copy receive for the receive buffers `shape` says (how
    /// many, and how many datagrams each holds at most): from the
    /// last accepted packet on, the next packets of its frame and of the
    /// stream's next frames (same cut), each frame not started yet in a slot
    /// reserved ahead for it. The receiver points the kernel at the targets,
    /// records what landed ([`LandingPlan::set_arrived`]) and hands each
    /// landed datagram to [`Reassembler::on_landed_at`]; the next plan (or
    /// [`Reassembler::end_landing`]) forgets the targets.
    /// Plans nothing when the stream's packets carry fewer than
    /// `min_payload` bytes.
    pub fn plan_landing(&mut self, shape: LandingShape, min_payload: usize) -> &mut LandingPlan {
        self.landing.clear();
        if let Some(c) = self.cursor
            && c.stride as usize >= min_payload
        {
            self.plan_from(c, shape);
        }
        &mut self.landing
    }

    fn plan_from(&mut self, c: Cursor, shape: LandingShape) {
        let groups = shape.buffers;
        let per_buffer = shape.datagrams_per_buffer.max(1);
        let (mut key, mut index) = (c.key, c.next_index);
        let mut pos = self.in_flight.iter().position(|f| f.key == key);
        if pos.is_none() {
            // The cursor's frame was published: its stragglers would be late.
            key = (key.0, key.1.wrapping_add(1));
            index = 0;
            pos = self.in_flight.iter().position(|f| f.key == key);
            if pos.is_some() {
                return;
            }
        }
        let mut spare = 0;
        loop {
            let ring_seq = match pos {
                Some(p) => self.in_flight[p].ring_seq,
                None => {
                    if spare == self.spares.len() {
                        if self.spares.len() >= self.max_spares {
                            break;
                        }
                        match self.writer.reserve() {
                            Ok(seq) => self.spares.push_back(seq),
                            Err(_) => break,
                        }
                    }
                    spare += 1;
                    self.spares[spare - 1]
                }
            };
            while index < c.packet_count {
                if let Some(p) = pos {
                    let seen = &self.in_flight[p].seen;
                    if seen[index as usize / 64] & (1 << (index % 64)) != 0 {
                        self.landing.end_group();
                        return;
                    }
                }
                let offset = index as usize * c.stride as usize;
                let len = (c.frame_len as usize - offset).min(c.stride as usize);
                if self.landing.open_group_targets() >= per_buffer
                    || self.landing.open_group_bytes() + native::HEADER_LEN + len > GROUP_BYTES
                {
                    self.landing.end_group();
                    if self.landing.groups() >= groups {
                        return;
                    }
                }
                let addr = self.writer.payload_mut(ring_seq)[offset..offset + len].as_mut_ptr();
                self.landing.push(LandingTarget { ring_seq, offset, len }, addr);
                index += 1;
                if len != c.stride as usize || index == c.packet_count {
                    // A shorter datagram ends a GRO buffer.
                    self.landing.end_group();
                    if self.landing.groups() >= groups {
                        return;
                    }
                }
            }
            key = (key.0, key.1.wrapping_add(1));
            index = 0;
            pos = self.in_flight.iter().position(|f| f.key == key);
            if pos.is_some() {
                // That frame started out of order: stop guessing.
                break;
            }
        }
        self.landing.end_group();
    }

    /// Handles the datagram whose header is `head` and whose payload the
    /// kernel put at landing target `k` of the last plan (see
    /// [`Reassembler::plan_landing`]), received at `rx_ns`, handled at `now_ns`.
    pub fn on_landed_at(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        self.handle_landed(k, head, rx_ns, now_ns);
        self.pending.flush_into(&self.counters);
    }

    /// As [`Reassembler::on_landed_at`] for each `(target, header)` of
    /// `landed` (one receive buffer's landed datagrams, in order), with the
    /// counts every datagram raises added to the shared counters once at
    /// the end (and before each publication) instead of once per datagram.
    pub fn on_landed_run_at<'a>(
        &mut self,
        landed: impl IntoIterator<Item = (usize, &'a [u8])>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        for (k, head) in landed {
            self.handle_landed(k, head, rx_ns, now_ns);
        }
        self.pending.flush_into(&self.counters);
    }

    fn handle_landed(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        let available = match self.landing.landed(k) {
            Landed::InSlot(len) | Landed::Spilled { len, .. } => len,
            Landed::Empty => {
                debug_assert!(false, "landing target {k} holds no datagram");
                return;
            }
        };
        self.pending.datagram(head.len() + available);
        match native::parse_split(head, available) {
            Ok(h) => self.on_packet(&h, Payload::Landed(k), rx_ns, now_ns),
            Err(e) => IngestCounters::bump(self.counters.parse_error(&e)),
        }
        self.landing.take(k);
        self.publish_ready(rx_ns, now_ns);
    }

    /// The current batch's landing plan (for the receiver to record arrivals).
    pub fn landing_mut(&mut self) -> &mut LandingPlan {
        &mut self.landing
    }

    /// Forgets the current landing plan (every landed datagram was handled).
    pub fn end_landing(&mut self) {
        self.landing.clear();
    }

    /// Moves every unhandled landed payload in bytes `range` of slot
    /// `ring_seq` to the spill area, before those bytes are written.
    fn make_room(&mut self, ring_seq: u64, range: std::ops::Range<usize>) {
        loop {
            let Some(k) = self.landing.pending_in(ring_seq, range.clone()).next() else { break };
            self.spill_landed(k);
        }
    }

    /// Moves target `k`'s payload, if it is still in its slot, to the spill area.
    fn spill_landed(&mut self, k: usize) {
        if let Landed::InSlot(len) = self.landing.landed(k) {
            let t = self.landing.target(k);
            let bytes = &self.writer.payload_mut(t.ring_seq)[t.offset..t.offset + len];
            self.landing.spill(k, bytes);
        }
    }

    /// The tick of a receiver with datagrams still waiting: publishes at
    /// `now_ns` what is complete, or stale at `stale_at` (the arrival time
    /// of the latest datagram it handled).
    pub fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        self.publish_ready(stale_at.min(now_ns), now_ns);
    }

    /// Publishes every frame in flight, incomplete ones flagged, at `now_ns`.
    pub fn flush(&mut self, now_ns: u64) {
        while !self.in_flight.is_empty() {
            self.publish_oldest(now_ns, false);
        }
    }

    fn on_packet(&mut self, h: &NativeHeader, payload: Payload<'_>, rx_ns: u64, now_ns: u64) {
        let key = (h.stream_id, h.frame_seq);
        if let Some(pos) = self.in_flight.iter().position(|f| f.key == key) {
            self.add_to_frame(pos, h, payload, rx_ns);
            return;
        }
        if self.is_restart(h) {
            self.restart_stream(h.stream_id, h.frame_seq, now_ns);
        }
        match self.recent.get(key) {
            Outcome::Published => return IngestCounters::bump(&self.counters.late),
            Outcome::Dropped => return IngestCounters::bump(&self.counters.dropped_frame_packets),
            Outcome::Empty => {}
        }
        if h.packet_count > h.frame_len.max(1) || h.packet_count > self.max_packets {
            return IngestCounters::bump(&self.counters.bad_packet_count);
        }
        let Some(stride) = implied_stride(h) else {
            return IngestCounters::bump(&self.counters.layout_mismatch);
        };
        if h.frame_len as usize > self.capacity {
            return self.drop_frame(key, |c| &c.frame_too_large);
        }
        self.high_water.update(h.stream_id, h.frame_seq, true);
        if self.in_flight.len() >= self.max_in_flight {
            self.publish_oldest(now_ns, false);
        }
        let ring_seq = match self.spares.pop_front().map_or_else(|| self.writer.reserve(), Ok) {
            Ok(seq) => seq,
            Err(_) => return self.drop_frame(key, |c| &c.ring_full),
        };
        IngestCounters::bump(&self.counters.frames_started);
        debug_assert!(self.in_flight.back().is_none_or(|f| f.ring_seq + 1 == ring_seq));
        let mut seen = self.spare_bitmaps.pop().unwrap_or_default();
        seen.clear();
        seen.resize((h.packet_count as usize).div_ceil(64), 0);
        self.in_flight.push_back(Frame {
            key,
            ring_seq,
            packet_count: h.packet_count,
            frame_len: h.frame_len,
            stride,
            received: 0,
            prefix: 0,
            first_rx_ns: rx_ns,
            last_rx_ns: rx_ns,
            sender_ts_ns: h.sender_ts_ns,
            seen,
        });
        self.add_to_frame(self.in_flight.len() - 1, h, payload, rx_ns);
    }

    /// Whether `h` would start a frame (its count, cut and length pass rule 4) with
    /// a sequence outside the restart window around its stream's high-water mark.
    fn is_restart(&self, h: &NativeHeader) -> bool {
        let Some(mark) = self.high_water.get(h.stream_id) else { return false };
        mark.abs_diff(h.frame_seq) > self.restart_window
            && h.packet_count <= h.frame_len.max(1)
            && h.packet_count <= self.max_packets
            && implied_stride(h).is_some()
            && h.frame_len as usize <= self.capacity
    }

    /// Rule 7: counts and logs the restart of `stream_id`, publishes the frames
    /// in flight up to the stream's last one, forgets its finished frames and
    /// moves its high-water mark to `frame_seq`.
    #[cold]
    fn restart_stream(&mut self, stream_id: u32, frame_seq: u64, now_ns: u64) {
        let mark = self.high_water.get(stream_id).unwrap_or_default();
        IngestCounters::bump(&self.counters.stream_restarts);
        let in_flight = self.in_flight.iter().filter(|f| f.key.0 == stream_id).count();
        tracing::warn!(
            stream_id,
            from_seq = mark,
            to_seq = frame_seq,
            frames_in_flight = in_flight,
            "stream restart: frame sequence jumped more than ingest.restart_window frames; \
             its frames in flight are published (incomplete ones flagged) and the stream starts over"
        );
        if let Some(last) = self.in_flight.iter().rposition(|f| f.key.0 == stream_id) {
            for _ in 0..=last {
                self.publish_oldest(now_ns, false);
            }
        }
        self.recent.forget_stream(stream_id);
        self.high_water.update(stream_id, frame_seq, false);
    }

    /// Counts a frame dropped whole (once) and its first datagram, and
    /// remembers its key so that its further packets are not counted again.
    fn drop_frame(&mut self, key: FrameKey, reason: fn(&IngestCounters) -> &AtomicU64) {
        IngestCounters::bump(reason(&self.counters));
        IngestCounters::bump(&self.counters.dropped_frame_packets);
        self.recent.insert(key, Outcome::Dropped);
    }

    fn add_to_frame(&mut self, pos: usize, h: &NativeHeader, payload: Payload<'_>, rx_ns: u64) {
        let c = &*self.counters;
        let f = &mut self.in_flight[pos];
        let drop = if h.packet_count != f.packet_count {
            Some(&c.packet_count_mismatch)
        } else if h.frame_len != f.frame_len {
            Some(&c.frame_len_mismatch)
        } else if !f.fits_cut(h) {
            debug_assert_ne!(implied_stride(h), Some(f.stride));
            Some(&c.layout_mismatch)
        } else if f.seen[h.packet_index as usize / 64] & (1 << (h.packet_index % 64)) != 0 {
            Some(&c.duplicate)
        } else {
            None
        };
        if let Some(counter) = drop {
            return IngestCounters::bump(counter);
        }
        debug_assert_eq!(implied_stride(h), Some(f.stride));
        let start = h.payload_offset as usize;
        // The regular cut and `frame_len <= capacity` keep this inside the
        // slot; the check makes that hold even if those checks were wrong.
        let end = start.saturating_add(h.payload_len as usize);
        if end > self.capacity {
            debug_assert!(false, "packet passed the layout checks but leaves the slot");
            return IngestCounters::bump(&c.layout_mismatch);
        }
        let ring_seq = f.ring_seq;
        self.place(ring_seq, start..end, payload);
        let f = &mut self.in_flight[pos];
        f.seen[h.packet_index as usize / 64] |= 1 << (h.packet_index % 64);
        f.received += 1;
        if h.packet_index == f.prefix && f.extend_prefix() {
            self.writer.mark_received(f.ring_seq, f.prefix_bytes());
        }
        f.last_rx_ns = f.last_rx_ns.max(rx_ns);
        f.first_rx_ns = f.first_rx_ns.min(rx_ns);
        self.cursor = Some(Cursor {
            key: f.key,
            next_index: h.packet_index + 1,
            packet_count: f.packet_count,
            frame_len: f.frame_len,
            stride: f.stride,
        });
        self.pending.accepted();
    }

    /// Puts a packet's payload at bytes `range` of slot `ring_seq` (inside
    /// the payload capacity): nothing to do when the kernel put it there;
    /// otherwise unhandled landed payloads there are moved away first.
    fn place(&mut self, ring_seq: u64, range: std::ops::Range<usize>, payload: Payload<'_>) {
        match payload {
            Payload::Bytes(bytes) => {
                self.make_room(ring_seq, range.clone());
                let ahead = prefetch_window(&range);
                let slot = self.writer.payload_mut(ring_seq);
                slot[range].copy_from_slice(bytes);
                prefetch_for_write(slot, ahead);
            }
            Payload::Landed(k) => {
                let t = self.landing.target(k);
                if (t.ring_seq, t.offset) == (ring_seq, range.start)
                    && self.landing.landed(k) == Landed::InSlot(range.len())
                {
                    self.landing.take(k);
                    self.pending.placed_by_kernel();
                    return;
                }
                // Elsewhere: out of its slot first (what is written next may
                // cover it), then to its place.
                self.spill_landed(k);
                self.make_room(ring_seq, range.clone());
                if let Landed::Spilled { at, len } = self.landing.landed(k) {
                    let n = range.len().min(len);
                    let dst = &mut self.writer.payload_mut(ring_seq)[range.start..range.start + n];
                    dst.copy_from_slice(&self.landing.spilled(at, len)[..n]);
                }
            }
        }
    }

    /// Publishes at `now_ns`, oldest first, every frame that is complete or
    /// stale at `stale_at` (the arrival time of the latest datagram handled,
    /// or the current time once none is waiting).
    fn publish_ready(&mut self, stale_at: u64, now_ns: u64) {
        while let Some(f) = self.in_flight.front() {
            let stale = stale_at.saturating_sub(f.first_rx_ns) >= self.timeout_ns;
            if !f.complete() && !stale {
                break;
            }
            self.publish_oldest(now_ns, stale);
        }
    }

    /// Publishes the oldest frame in flight; an incomplete one gets its missing
    /// packets zeroed and is flagged (`timed_out` adds `SLOT_TIMED_OUT`).
    fn publish_oldest(&mut self, now_ns: u64, timed_out: bool) {
        let Some(f) = self.in_flight.pop_front() else { return };
        // A frame is never visible before the datagrams that made it are counted.
        self.pending.flush_into(&self.counters);
        // Payloads the kernel put in this slot for other packets (a frame
        // other than the one predicted took the slot) move out before the
        // slot is handed to the consumer.
        self.make_room(f.ring_seq, 0..self.capacity);
        let flags = if f.complete() {
            IngestCounters::bump(&self.counters.frames_complete);
            SLOT_COMPLETE
        } else {
            self.zero_missing(&f);
            IngestCounters::bump(&self.counters.frames_incomplete);
            if timed_out {
                IngestCounters::bump(&self.counters.frames_timed_out);
                SLOT_INCOMPLETE | SLOT_TIMED_OUT
            } else {
                SLOT_INCOMPLETE
            }
        };
        // The mark again (the same value unless no prefix was ever reported),
        // so that the header write below leaves the word as it is.
        let mark = received_mark(f.ring_seq, f.prefix_bytes());
        self.writer.mark_received(f.ring_seq, f.prefix_bytes());
        let header = SlotHeader {
            received_mark: mark,
            frame_seq: f.key.1,
            stream_id: f.key.0,
            flags,
            payload_len: f.frame_len,
            packets_expected: f.packet_count,
            packets_received: f.received,
            sender_ts_ns: f.sender_ts_ns,
            first_rx_ns: f.first_rx_ns,
            last_rx_ns: f.last_rx_ns,
            published_ns: now_ns,
            ..SlotHeader::default()
        };
        self.writer.publish(f.ring_seq, &header);
        self.recent.insert(f.key, Outcome::Published);
        self.spare_bitmaps.push(f.seen);
    }

    /// Zeroes the byte range of every packet not received (the slot may hold
    /// an older frame's bytes there).
    fn zero_missing(&mut self, f: &Frame) {
        let stride = f.stride as usize;
        let frame_len = f.frame_len as usize;
        for (w, &word) in f.seen.iter().enumerate() {
            let mut missing = !word;
            while missing != 0 {
                let index = w * 64 + missing.trailing_zeros() as usize;
                missing &= missing - 1;
                if index >= f.packet_count as usize {
                    break;
                }
                let start = (index * stride).min(frame_len);
                let end = (start + stride).min(frame_len);
                self.make_room(f.ring_seq, start..end);
                self.writer.payload_mut(f.ring_seq)[start..end].fill(0);
            }
        }
    }
}

#[cfg(test)]
#[path = "reassembly_mark_tests.rs"]
mod mark_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::FrameAssembler;
    use crate::ring::layout::ring_bytes;
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn ring(slots: usize, capacity: usize) -> Arc<FrameRing> {
        let mem = HostMemory::new(ring_bytes(slots, capacity).unwrap()).unwrap();
        FrameRing::new(Box::new(mem), slots, capacity, OverrunPolicy::Every).unwrap()
    }

    /// A reassembler over a fresh ring, and the ring's reader.
    fn setup(slots: usize, capacity: usize, cfg: ReassemblyConfig) -> (Reassembler, RingReader) {
        let r = ring(slots, capacity);
        let reader = r.reader().unwrap();
        (Reassembler::new(cfg, r.writer().unwrap(), Arc::default()), reader)
    }

    /// The datagrams of one frame cut with `max_payload`.
    fn packets(stream_id: u32, frame_seq: u64, frame: &[u8], max_payload: u32) -> Vec<Vec<u8>> {
        native::encode_frame(stream_id, frame_seq, frame, max_payload, 1000 + frame_seq)
    }

    /// Every published frame: (header, payload copy), consuming them.
    fn drain(reader: &mut RingReader) -> Vec<(SlotHeader, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(slot) = reader.claim() {
            let seq = slot.seq;
            out.push((slot.header, slot.payload.to_vec()));
            reader.finish(seq);
        }
        out
    }

    fn snap(r: &Reassembler) -> crate::ingest::IngestSnapshot {
        r.counters().snapshot()
    }

    proptest! {
        /// For packets arriving in order, the prefetch windows tile the
        /// slot: each starts where the previous one ended, and after every
        /// payload at least `PREFETCH_AHEAD_BYTES` (and whole payloads)
        /// ahead of it are requested.
        #[test]
        fn prefetch_windows_tile_the_bytes_ahead(len in 1usize..20_000, packets in 1usize..40) {
            let mut requested_to = 0;
            for i in 0..packets {
                let range = i * len..(i + 1) * len;
                let w = prefetch_window(&range);
                prop_assert_eq!(w.start, if i == 0 { range.end } else { requested_to });
                prop_assert!(w.end >= range.end + PREFETCH_AHEAD_BYTES);
                prop_assert_eq!((w.end - range.end) % len, 0);
                requested_to = w.end;
            }
        }
    }

    fn frame_bytes(len: usize, seed: u8) -> Vec<u8> {
        (0..len).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1).collect()
    }

    #[test]
    fn a_buffer_handled_in_one_call_counts_and_publishes_as_datagram_by_datagram() {
        // Three frames of four datagrams, one datagram malformed and one
        // duplicated, handled once per datagram and once as one buffer.
        let mut datagrams: Vec<Vec<u8>> =
            (1..=3).flat_map(|seq| packets(5, seq, &frame_bytes(1000, seq as u8), 300)).collect();
        datagrams.insert(5, vec![0xEE; 20]);
        datagrams.insert(2, datagrams[1].clone());
        let (mut one_by_one, mut rd1) = setup(8, 1024, ReassemblyConfig::default());
        for d in &datagrams {
            one_by_one.on_datagram_at(d, 100, 200);
        }
        let (mut batched, mut rd2) = setup(8, 1024, ReassemblyConfig::default());
        // While the buffer is handled, every frame the ring shows has had its
        // datagrams counted: a frame is never visible before its counts.
        let counters = Arc::clone(batched.counters());
        let mut seen_published = 0;
        let mut each = datagrams.iter().map(|d| {
            let published = rd2.ring().head();
            let counted = counters.snapshot().packets_accepted;
            assert!(counted >= published * 4, "{published} frames visible, {counted} packets counted");
            seen_published = seen_published.max(published);
            d.as_slice()
        });
        batched.on_datagrams_at(&mut each, 100, 200);
        assert_eq!(seen_published, 2, "frames published while the buffer was handled");
        assert_eq!(snap(&batched), snap(&one_by_one));
        let s = snap(&batched);
        assert_eq!((s.datagrams, s.packets_accepted, s.duplicate, s.frames_complete), (14, 12, 1, 3));
        assert_eq!(s.datagrams_accounted(), s.datagrams, "every datagram accepted or dropped by kind");
        assert_eq!(drain(&mut rd2), drain(&mut rd1));
    }

    /// Lands `datagrams` (in order, each the next target of the plan
    /// `plan_landing` makes now) as the kernel would: each payload written
    /// at its target's place in the slot. Returns each one's (target, header).
    fn land(r: &mut Reassembler, datagrams: &[Vec<u8>]) -> Vec<(usize, Vec<u8>)> {
        let plan = r.plan_landing(LandingShape::coalesced(8), 1);
        datagrams
            .iter()
            .enumerate()
            .map(|(k, d)| {
                let payload = &d[native::HEADER_LEN..];
                assert_eq!(
                    plan.target(k).len,
                    payload.len(),
                    "datagram {k} is not where the plan expects it"
                );
                // SAFETY: the plan was just made, so its slots are reserved
                // and unpublished; nothing else touches them here.
                unsafe { plan.land(k, payload) };
                (k, d[..native::HEADER_LEN].to_vec())
            })
            .collect()
    }

    #[test]
    fn a_landed_run_handled_in_one_call_counts_and_publishes_as_one_by_one() {
        // Three frames of four datagrams; the first datagram of the first
        // frame is copied (it starts the prediction), the other eleven land
        // in the slots, one of them under a header that fails to parse.
        let datagrams: Vec<Vec<u8>> =
            (1..=3).flat_map(|seq| packets(5, seq, &frame_bytes(1000, seq as u8), 300)).collect();
        let run = |batched: bool| {
            let (mut r, mut rd) = setup(8, 1024, ReassemblyConfig::default());
            r.on_datagram_at(&datagrams[0], 100, 200);
            let mut landed = land(&mut r, &datagrams[1..]);
            landed[6].1[0] = b'X';
            if batched {
                // Every frame the ring shows while the run is handled has
                // had its datagrams counted.
                let counters = Arc::clone(r.counters());
                let ring = Arc::clone(rd.ring());
                let mut each = landed.iter().map(|(k, head)| {
                    let published = ring.head();
                    let counted = counters.snapshot().packets_accepted;
                    assert!(
                        counted >= published * 4,
                        "{published} frames visible, {counted} packets counted"
                    );
                    (*k, head.as_slice())
                });
                r.on_landed_run_at(&mut each, 100, 200);
            } else {
                for (k, head) in &landed {
                    r.on_landed_at(*k, head, 100, 200);
                }
            }
            // Nothing is left pending once the call returns.
            let after_call = snap(&r);
            r.on_tick(10_000_000_000);
            (after_call, snap(&r), drain(&mut rd))
        };
        let (one_by_one, batched) = (run(false), run(true));
        assert_eq!(batched.0, one_by_one.0, "counts as the call returned");
        assert_eq!(batched.1, one_by_one.1);
        assert_eq!(batched.2, one_by_one.2);
        let s = &batched.1;
        assert_eq!((s.datagrams, s.packets_accepted, s.placed_by_kernel, s.bad_magic), (12, 11, 10, 1));
        assert_eq!((s.frames_complete, s.frames_incomplete), (2, 1));
        assert_eq!(s.datagrams_accounted(), s.datagrams, "every datagram accepted or dropped by kind");
    }

    #[test]
    fn plans_take_the_shape_the_receiver_asks_for() {
        let (mut r, _rd) = setup(8, 4096, ReassemblyConfig::default());
        // One packet of a 10-packet frame of 400-byte payloads accepted:
        // the plan starts at the second.
        let datagrams = packets(3, 1, &frame_bytes(4000, 5), 400);
        r.on_datagram(&datagrams[0], 100);
        let groups = |plan: &LandingPlan| (0..plan.groups()).map(|g| plan.group(g).len()).collect::<Vec<_>>();
        // Whole GRO buffers: the frame's other nine packets fit one.
        assert_eq!(groups(r.plan_landing(LandingShape::coalesced(3), 1)), [9, 10, 10]);
        // Datagrams one per receive buffer: one target per group, in order.
        let plan = r.plan_landing(LandingShape { buffers: 4, datagrams_per_buffer: 1 }, 1);
        assert_eq!(groups(plan), [1, 1, 1, 1]);
        let offsets: Vec<_> = (0..4).map(|k| plan.target(k).offset).collect();
        assert_eq!(offsets, [400, 800, 1200, 1600]);
        assert_eq!(groups(r.plan_landing(LandingShape { buffers: 2, datagrams_per_buffer: 4 }, 1)), [4, 4]);
        // Asking for none is taken as one a buffer.
        assert_eq!(groups(r.plan_landing(LandingShape { buffers: 2, datagrams_per_buffer: 0 }, 1)), [1, 1]);
    }

    #[test]
    fn in_order_frame_is_published_complete_with_its_timestamps() {
        let (mut r, mut rd) = setup(4, 1024, ReassemblyConfig::default());
        let data = frame_bytes(1000, 3);
        for (i, p) in packets(9, 42, &data, 300).iter().enumerate() {
            assert!(rd.claim().is_none(), "published before its last packet");
            r.on_datagram(p, 100 + i as u64);
        }
        let out = drain(&mut rd);
        assert_eq!(out.len(), 1);
        let (h, payload) = &out[0];
        assert_eq!((h.stream_id, h.frame_seq, h.flags), (9, 42, SLOT_COMPLETE));
        assert_eq!((h.packets_expected, h.packets_received), (4, 4));
        assert_eq!((h.first_rx_ns, h.last_rx_ns, h.published_ns, h.sender_ts_ns), (100, 103, 103, 1042));
        assert_eq!(payload, &data);
        let s = snap(&r);
        assert_eq!((s.datagrams, s.packets_accepted, s.frames_started, s.frames_complete), (4, 4, 1, 1));
        assert_eq!(s.bytes, (4 * native::HEADER_LEN + 1000) as u64);
    }

    #[test]
    fn parse_errors_are_counted_by_kind() {
        let (mut r, mut rd) = setup(4, 1024, ReassemblyConfig::default());
        let good = packets(1, 1, &frame_bytes(100, 0), 100).remove(0);
        let mut cases: Vec<(Vec<u8>, &str)> = vec![(good[..20].to_vec(), "short_header")];
        for (at, byte, kind) in [(0, b'Y', "bad_magic"), (4, 2, "bad_version"), (6, 40, "bad_header_len")] {
            let mut d = good.clone();
            d[at] = byte;
            cases.push((d, kind));
        }
        cases.push((good[..good.len() - 1].to_vec(), "truncated"));
        let mut d = good.clone();
        d[12..16].copy_from_slice(&5u32.to_le_bytes());
        cases.push((d, "bad_packet_index"));
        let mut d = good.clone();
        d[28..32].copy_from_slice(&1u32.to_le_bytes());
        cases.push((d, "payload_outside_frame"));
        for (d, kind) in &cases {
            r.on_datagram(d, 1);
            assert_eq!(snap(&r).get(kind), Some(1), "{kind}");
        }
        r.on_datagram(&good, 2);
        let s = snap(&r);
        assert_eq!(s.datagrams, cases.len() as u64 + 1);
        assert_eq!(s.datagrams_accounted(), s.datagrams);
        assert_eq!(drain(&mut rd).len(), 1, "a good packet after bad ones still makes its frame");
    }

    #[test]
    fn stateful_drops_are_counted_and_the_frame_survives() {
        let (mut r, mut rd) = setup(4, 4096, ReassemblyConfig::default());
        let data = frame_bytes(1000, 7);
        let p = packets(1, 5, &data, 250);
        r.on_datagram(&p[0], 1);
        r.on_datagram(&p[0], 2);
        assert_eq!(snap(&r).duplicate, 1);
        // Same frame key, other packet count (a 2-packet cut of the same length).
        let other_cut = packets(1, 5, &data, 500);
        r.on_datagram(&other_cut[1], 3);
        assert_eq!(snap(&r).packet_count_mismatch, 1);
        // Same key and count, other frame length.
        let other_len = packets(1, 5, &frame_bytes(999, 7), 250);
        r.on_datagram(&other_len[1], 4);
        assert_eq!(snap(&r).frame_len_mismatch, 1);
        // Same count and length, but off the frame's stride (offset 240 of 241-byte packets).
        let mut h = native::parse(&p[1]).unwrap().0;
        h.payload_offset = 240;
        r.on_datagram(&native::encode(&h, &data[240..490]), 5);
        assert_eq!(snap(&r).layout_mismatch, 1);
        for d in &p[1..] {
            r.on_datagram(d, 6);
        }
        let out = drain(&mut rd);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].0.flags, SLOT_COMPLETE);
        assert_eq!(out[0].1, data);
        r.on_datagram(&p[2], 7);
        let s = snap(&r);
        assert_eq!(s.late, 1);
        assert_eq!(s.datagrams_accounted(), s.datagrams);
        assert_eq!((s.packets_accepted, s.frames_complete, s.frames_incomplete), (4, 1, 0));
    }

    #[test]
    fn irregular_first_packets_and_oversized_counts_are_rejected() {
        let (mut r, _rd) =
            setup(4, 4096, ReassemblyConfig { max_packets_per_frame: 8, ..Default::default() });
        let base = NativeHeader { frame_len: 100, packet_count: 4, ..Default::default() };
        // Non-last packet not at index * len.
        let h = NativeHeader { packet_index: 1, payload_offset: 10, ..base };
        r.on_datagram(&native::encode(&h, &[0; 25]), 1);
        // Packet count that does not match ceil(frame_len / stride).
        let h = NativeHeader { packet_index: 0, ..base };
        r.on_datagram(&native::encode(&h, &[0; 50]), 1);
        // Last packet whose offset is not a multiple of its index.
        let h = NativeHeader { packet_index: 3, payload_offset: 91, ..base };
        r.on_datagram(&native::encode(&h, &[0; 9]), 1);
        // Empty non-last packet.
        let h = NativeHeader { packet_index: 0, ..base };
        r.on_datagram(&native::encode(&h, &[]), 1);
        assert_eq!(snap(&r).layout_mismatch, 4);
        // More packets than bytes, and more than the configured cap.
        let h = NativeHeader { frame_len: 3, packet_count: 4, ..base };
        r.on_datagram(&native::encode(&h, &[]), 1);
        let h = NativeHeader { frame_len: 90, packet_count: 9, ..base };
        r.on_datagram(&native::encode(&h, &[0; 10]), 1);
        let s = snap(&r);
        assert_eq!(s.bad_packet_count, 2);
        assert_eq!((s.frames_started, s.datagrams_accounted(), s.datagrams), (0, 6, 6));
    }

    #[test]
    fn frame_too_large_is_dropped_once_and_its_packets_counted() {
        let (mut r, mut rd) = setup(4, 512, ReassemblyConfig::default());
        for p in packets(1, 1, &frame_bytes(2000, 0), 400) {
            r.on_datagram(&p, 1);
        }
        let s = snap(&r);
        assert_eq!((s.frame_too_large, s.dropped_frame_packets, s.frames_started), (1, 5, 0));
        assert_eq!(s.datagrams_accounted(), 5);
        assert!(drain(&mut rd).is_empty());
    }

    #[test]
    fn ring_full_drops_the_whole_frame_once_and_recovers() {
        let (mut r, mut rd) = setup(2, 256, ReassemblyConfig::default());
        let frames: Vec<_> = (0..4u8).map(|i| frame_bytes(200, i)).collect();
        for (seq, f) in frames.iter().enumerate().take(3) {
            for p in packets(1, seq as u64, f, 100) {
                r.on_datagram(&p, 1);
            }
        }
        let s = snap(&r);
        assert_eq!((s.frames_complete, s.ring_full, s.dropped_frame_packets), (2, 1, 2));
        let out = drain(&mut rd);
        assert_eq!(out.iter().map(|(h, _)| h.frame_seq).collect::<Vec<_>>(), [0, 1]);
        // With the consumer caught up, the next frame gets a slot again.
        for p in packets(1, 3, &frames[3], 100) {
            r.on_datagram(&p, 2);
        }
        let out = drain(&mut rd);
        assert_eq!((out[0].0.frame_seq, &out[0].1), (3, &frames[3]));
        let s = snap(&r);
        assert_eq!(s.datagrams_accounted(), s.datagrams);
    }

    #[test]
    fn stale_frame_times_out_with_zeros_and_later_packets_are_late() {
        let cfg = ReassemblyConfig { frame_timeout_ms: 5, ..Default::default() };
        let (mut r, mut rd) = setup(4, 1024, cfg);
        let data = frame_bytes(300, 1);
        let p = packets(2, 8, &data, 100);
        r.on_datagram(&p[0], 10 * MS);
        r.on_datagram(&p[2], 11 * MS);
        r.on_tick(14 * MS);
        assert!(rd.claim().is_none(), "published before its timeout");
        r.on_tick(15 * MS);
        let out = drain(&mut rd);
        let (h, payload) = &out[0];
        assert_eq!(h.flags, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
        assert_eq!((h.packets_expected, h.packets_received, h.published_ns), (3, 2, 15 * MS));
        assert_eq!(&payload[..100], &data[..100]);
        assert!(payload[100..200].iter().all(|&b| b == 0));
        assert_eq!(&payload[200..], &data[200..]);
        r.on_datagram(&p[1], 16 * MS);
        let s = snap(&r);
        assert_eq!((s.frames_incomplete, s.frames_timed_out, s.late), (1, 1, 1));
    }

    #[test]
    fn packets_that_arrived_in_time_count_however_late_they_are_handled() {
        // A receiver 40 ms behind its socket: every packet arrived within the
        // 5 ms timeout, so the frame completes, a moment later than it arrived.
        let cfg = ReassemblyConfig { frame_timeout_ms: 5, ..Default::default() };
        let (mut r, mut rd) = setup(4, 1024, cfg);
        let data = frame_bytes(300, 7);
        let p = packets(2, 8, &data, 100);
        for (i, d) in p.iter().enumerate() {
            let rx = 10 * MS + i as u64 * MS;
            r.on_datagram_at(d, rx, rx + 40 * MS);
        }
        let out = drain(&mut rd);
        assert_eq!(out.len(), 1);
        let (h, payload) = &out[0];
        assert_eq!(h.flags, SLOT_COMPLETE);
        assert_eq!((h.packets_received, h.published_ns), (3, 52 * MS));
        assert_eq!(payload, &data);
        let s = snap(&r);
        assert_eq!((s.frames_complete, s.frames_timed_out, s.late), (1, 0, 0));
        // One that arrived past the deadline still times the frame out, and
        // is late itself.
        let next = frame_bytes(300, 8);
        let q = packets(2, 9, &next, 100);
        r.on_datagram_at(&q[0], 60 * MS, 61 * MS);
        r.on_datagram_at(&q[2], 66 * MS, 67 * MS);
        r.on_datagram_at(&q[1], 66 * MS, 67 * MS);
        let out = drain(&mut rd);
        assert_eq!(out[0].0.flags, SLOT_INCOMPLETE | SLOT_TIMED_OUT);
        assert_eq!(out[0].0.packets_received, 2);
        let s = snap(&r);
        assert_eq!((s.frames_timed_out, s.late), (1, 1));
        // A tick while datagrams wait goes by the latest arrival; one with
        // the socket empty by the clock.
        let last = frame_bytes(300, 9);
        let t = packets(2, 10, &last, 100);
        r.on_datagram_at(&t[0], 70 * MS, 71 * MS);
        r.on_tick_behind(72 * MS, 90 * MS);
        assert!(rd.claim().is_none(), "timed out by the clock while its packets may wait");
        r.on_tick(90 * MS);
        let out = drain(&mut rd);
        assert_eq!((out[0].0.flags, out[0].0.published_ns), (SLOT_INCOMPLETE | SLOT_TIMED_OUT, 90 * MS));
    }

    #[test]
    fn too_many_frames_in_flight_publishes_the_oldest_incomplete() {
        let cfg = ReassemblyConfig { max_frames_in_flight: 2, ..Default::default() };
        let (mut r, mut rd) = setup(8, 1024, cfg);
        let frames: Vec<_> = (0..3u8).map(|i| frame_bytes(200, i)).collect();
        let p: Vec<_> = frames.iter().enumerate().map(|(s, f)| packets(1, s as u64, f, 100)).collect();
        r.on_datagram(&p[0][0], 1);
        r.on_datagram(&p[1][0], 2);
        r.on_datagram(&p[1][1], 3);
        assert!(rd.claim().is_none(), "frame 1 is complete but waits for frame 0 (ring order)");
        r.on_datagram(&p[2][0], 4);
        let out = drain(&mut rd);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].0.frame_seq, out[0].0.flags), (0, SLOT_INCOMPLETE));
        assert_eq!((out[1].0.frame_seq, out[1].0.flags, &out[1].1), (1, SLOT_COMPLETE, &frames[1]));
        r.flush(9);
        let out = drain(&mut rd);
        assert_eq!((out[0].0.frame_seq, out[0].0.flags, out[0].0.published_ns), (2, SLOT_INCOMPLETE, 9));
        assert_eq!(r.frames_in_flight(), 0);
        let s = snap(&r);
        assert_eq!(
            (s.frames_started, s.frames_complete, s.frames_incomplete, s.frames_timed_out),
            (3, 1, 2, 0)
        );
    }

    #[test]
    fn empty_and_single_packet_frames() {
        let (mut r, mut rd) = setup(4, 64, ReassemblyConfig::default());
        for p in packets(1, 1, &[], 100).iter().chain(&packets(1, 2, &[5; 64], 100)) {
            r.on_datagram(p, 1);
        }
        let out = drain(&mut rd);
        assert_eq!(out.len(), 2);
        assert_eq!((out[0].0.flags, out[0].1.len()), (SLOT_COMPLETE, 0));
        assert_eq!((out[1].0.flags, &out[1].1[..]), (SLOT_COMPLETE, &[5u8; 64][..]));
    }

    /// Sends frames `seqs` of `stream` whole (10 bytes each) at time `t`.
    fn send_frames(r: &mut Reassembler, stream: u32, seqs: impl IntoIterator<Item = u64>, t: u64) {
        for seq in seqs {
            for p in packets(stream, seq, &frame_bytes(10, seq as u8), 4) {
                r.on_datagram(&p, t);
            }
        }
    }

    #[test]
    fn backwards_jump_beyond_the_window_is_a_restart() {
        let (mut r, mut rd) = setup(128, 64, ReassemblyConfig::default());
        send_frames(&mut r, 1, 0..50, 1);
        // A half-received frame of another stream, in flight across the restart.
        r.on_datagram(&packets(2, 7, &frame_bytes(10, 0), 4)[0], 1);
        assert_eq!(drain(&mut rd).len(), 50);
        // The sender rebooted: sequences start at 0 again.
        send_frames(&mut r, 1, 0..50, 2);
        let out = drain(&mut rd);
        let s = snap(&r);
        assert_eq!((s.stream_restarts, s.late, s.datagrams_accounted()), (1, 0, s.datagrams));
        // Ring order: stream 2's frame (older) is published incomplete first.
        assert_eq!((out[0].0.stream_id, out[0].0.frame_seq, out[0].0.flags), (2, 7, SLOT_INCOMPLETE));
        let second: Vec<_> = out[1..].iter().map(|(h, _)| (h.frame_seq, h.flags)).collect();
        assert_eq!(second, (0..50).map(|q| (q, SLOT_COMPLETE)).collect::<Vec<_>>());
        // The restarted stream's old frames are forgotten, the new ones remembered.
        send_frames(&mut r, 1, [40], 3);
        assert_eq!((snap(&r).late, snap(&r).stream_restarts), (3, 1));
    }

    #[test]
    fn forwards_jump_beyond_the_window_is_a_restart_that_flushes_the_stream() {
        let cfg = ReassemblyConfig { restart_window: 100, ..Default::default() };
        let (mut r, mut rd) = setup(128, 64, cfg);
        send_frames(&mut r, 1, 0..5, 1);
        r.on_datagram(&packets(1, 5, &frame_bytes(10, 0), 4)[0], 1);
        assert_eq!(r.frames_in_flight(), 1);
        send_frames(&mut r, 1, 106..108, 2);
        let out = drain(&mut rd);
        let seqs: Vec<_> = out.iter().map(|(h, _)| (h.frame_seq, h.flags)).collect();
        assert_eq!(&seqs[5..], [(5, SLOT_INCOMPLETE), (106, SLOT_COMPLETE), (107, SLOT_COMPLETE)]);
        let s = snap(&r);
        assert_eq!((s.stream_restarts, s.frames_incomplete, s.frames_complete), (1, 1, 7));
        // Exactly the window away is not a restart; one frame more is.
        send_frames(&mut r, 1, [207], 3);
        assert_eq!(snap(&r).stream_restarts, 1);
        send_frames(&mut r, 1, [308], 3);
        assert_eq!(snap(&r).stream_restarts, 2);
    }

    #[test]
    fn reordering_and_duplicates_inside_the_window_are_not_restarts() {
        let (mut r, mut rd) = setup(128, 64, ReassemblyConfig::default());
        send_frames(&mut r, 1, 0..40, 1);
        // 30 frames back: late, not a restart; an unseen older frame is reassembled.
        send_frames(&mut r, 1, [10], 2);
        let s = snap(&r);
        assert_eq!((s.late, s.stream_restarts), (3, 0));
        // Another stream's sequences are independent of stream 1's.
        send_frames(&mut r, 2, [1_000_000, 0], 3);
        // A malformed packet far away is not a restart either.
        let h = NativeHeader {
            stream_id: 1,
            frame_seq: 1 << 40,
            packet_count: 5,
            frame_len: 4,
            ..Default::default()
        };
        r.on_datagram(&native::encode(&h, &[]), 4);
        let s = snap(&r);
        assert_eq!(
            (s.stream_restarts, s.bad_packet_count),
            (1, 1),
            "stream 2 jumped back by 1e6: one restart"
        );
        // Nor is a frame too large for a slot, and it does not move the mark.
        let big = packets(1, 5000, &frame_bytes(100, 0), 50);
        r.on_datagram(&big[0], 5);
        send_frames(&mut r, 1, [41], 5);
        let s = snap(&r);
        assert_eq!((s.stream_restarts, s.frame_too_large, s.frames_complete), (1, 1, 43));
        assert_eq!(drain(&mut rd).len(), 43);
    }

    /// One packet of the property test: which frame, which index, its bytes.
    struct Sent {
        frame: usize,
        index: u32,
        datagram: Vec<u8>,
    }

    /// Frames (bytes, max payload), per-packet fates (lost, extra copies), a
    /// permutation of delivery places, and `max_frames_in_flight`.
    type Scenario = (Vec<(Vec<u8>, u32)>, Vec<(bool, u8)>, Vec<usize>, usize);

    fn scenario() -> impl Strategy<Value = Scenario> {
        let frames = prop::collection::vec((prop::collection::vec(any::<u8>(), 0..3000), 8u32..1500), 1..7);
        frames.prop_flat_map(|frames| {
            let total: usize =
                frames.iter().map(|(f, mp)| native::packet_span(f.len() as u32, *mp, 0).0 as usize).sum();
            // Per packet: lost?, extra copies; then a permutation of all copies.
            let fates = prop::collection::vec((prop::bool::weighted(0.15), 0u8..3), total);
            (Just(frames), fates, Just((0..total * 3).collect::<Vec<_>>()).prop_shuffle(), 1usize..8)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

        #[test]
        fn any_order_loss_and_duplicates(
            (frames, fates, order, max_in_flight) in scenario(),
            runts in prop::collection::vec((any::<prop::sample::Index>(), 0usize..2, any::<bool>()), 0..24),
        ) {
            const SLOTS: usize = 8;
            let r = ring(SLOTS, 3000);
            let mut rd = r.reader().unwrap();
            let mut w = r.writer().unwrap();
            // Dirty every slot so that missing bytes must be zeroed explicitly.
            for _ in 0..SLOTS {
                let seq = w.reserve().unwrap();
                w.payload_mut(seq).fill(0xEE);
                w.publish(seq, &SlotHeader { payload_len: 3000, ..Default::default() });
            }
            drain(&mut rd);
            let cfg = ReassemblyConfig { max_frames_in_flight: max_in_flight, ..Default::default() };
            let mut re = Reassembler::new(cfg, w, Arc::default());

            let mut sent = Vec::new();
            for (fi, (data, mp)) in frames.iter().enumerate() {
                for (index, d) in packets(3, 100 + fi as u64, data, *mp).into_iter().enumerate() {
                    sent.push(Sent { frame: fi, index: index as u32, datagram: d });
                }
            }
            // Copies: each packet once unless lost, plus its duplicates;
            // `order` is a permutation of 3 * packets places.
            let mut lost = vec![vec![]; frames.len()];
            let mut schedule = Vec::new();
            for (k, (s, &(is_lost, dups))) in sent.iter().zip(&fates).enumerate() {
                if is_lost {
                    lost[s.frame].push(s.index);
                    continue;
                }
                for copy in 0..=dups as usize {
                    schedule.push((order[k * 3 + copy], k));
                }
            }
            schedule.sort_unstable();
            // Empty and one-byte datagrams interleaved with the stream, alone
            // or two in a run handed over at once (as in one receive batch).
            let mut at_place: Vec<Vec<(usize, bool)>> = vec![Vec::new(); schedule.len() + 1];
            for (place, len, in_run) in &runts {
                at_place[place.index(schedule.len() + 1)].push((*len, *in_run));
            }
            let mut runts_sent = 0u64;
            for (t, runts_here) in at_place.iter().enumerate() {
                for &(len, in_run) in runts_here {
                    let runt = &[0x5au8][..len];
                    if in_run {
                        re.on_datagrams_at([runt, runt].into_iter(), t as u64 + 1, t as u64 + 1);
                        runts_sent += 2;
                    } else {
                        re.on_datagram(runt, t as u64 + 1);
                        runts_sent += 1;
                    }
                }
                if let Some(&(_, k)) = schedule.get(t) {
                    re.on_datagram(&sent[k].datagram, t as u64 + 1);
                }
            }
            re.flush(u64::MAX);
            let published = drain(&mut rd);
            let s = snap(&re);

            let mut seen_frames = std::collections::HashSet::new();
            for (h, payload) in &published {
                let fi = (h.frame_seq - 100) as usize;
                prop_assert!(seen_frames.insert(fi), "frame {} published twice", fi);
                let (data, mp) = &frames[fi];
                prop_assert_eq!(payload.len(), data.len());
                if h.flags == SLOT_COMPLETE {
                    prop_assert!(lost[fi].is_empty());
                    prop_assert_eq!(payload, data);
                } else {
                    prop_assert_eq!(h.flags, SLOT_INCOMPLETE);
                    prop_assert!(h.packets_received < h.packets_expected);
                    for (i, (&got, &want)) in payload.iter().zip(data).enumerate() {
                        prop_assert!(got == want || got == 0, "byte {} of frame {}", i, fi);
                    }
                    for &index in &lost[fi] {
                        let (_, off, len) = native::packet_span(data.len() as u32, *mp, index);
                        prop_assert!(payload[off as usize..(off + len) as usize].iter().all(|&b| b == 0));
                    }
                }
            }
            // Every frame with a delivered packet is published (the ring has room
            // for all of them); a frame with a lost packet never as complete.
            for (fi, l) in lost.iter().enumerate() {
                let total = sent.iter().filter(|p| p.frame == fi).count();
                prop_assert_eq!(seen_frames.contains(&fi), l.len() < total);
            }
            if max_in_flight >= frames.len() {
                let complete = published.iter().filter(|(h, _)| h.flags == SLOT_COMPLETE).count();
                prop_assert_eq!(complete, lost.iter().filter(|l| l.is_empty()).count());
            }
            prop_assert_eq!(s.datagrams, schedule.len() as u64 + runts_sent);
            prop_assert_eq!(s.short_header, runts_sent);
            prop_assert_eq!(s.datagrams_accounted(), s.datagrams);
            prop_assert_eq!(s.frames_started, published.len() as u64);
            prop_assert_eq!(s.frames_complete + s.frames_incomplete, s.frames_started);
            prop_assert_eq!(s.frames_timed_out, 0);
            prop_assert_eq!(s.frames_dropped(), 0);
        }

        #[test]
        fn arbitrary_datagrams_never_write_outside_the_slot(
            datagrams in prop::collection::vec(
                (any::<[u8; native::HEADER_LEN]>(), prop::collection::vec(any::<u8>(), 0..300), 0u8..4),
                1..40,
            )
        ) {
            // Headers biased towards valid ones: magic, version, length patched in
            // most, small counts and offsets so that many reach the slot logic.
            let (mut re, mut rd) = setup(4, 256, ReassemblyConfig::default());
            for (t, (mut head, payload, patch)) in datagrams.into_iter().enumerate() {
                if patch > 0 {
                    head[..4].copy_from_slice(&native::MAGIC);
                    head[4] = native::VERSION;
                    head[6..8].copy_from_slice(&(native::HEADER_LEN as u16).to_le_bytes());
                    head[36..40].copy_from_slice(&(payload.len() as u32).to_le_bytes());
                    head[8..12].fill(0);
                    head[17..24].fill(0);
                    head[13..16].fill(0);
                    head[25..28].fill(0);
                    head[30..32].fill(0);
                    head[34..36].fill(0);
                }
                let mut d = head.to_vec();
                d.extend_from_slice(&payload);
                re.on_datagram(&d, t as u64);
                for (h, p) in drain(&mut rd) {
                    prop_assert!(p.len() <= 256 && h.packets_received <= h.packets_expected);
                }
            }
            let s = snap(&re);
            prop_assert_eq!(s.datagrams_accounted(), s.datagrams);
        }

        /// Valid datagrams of a few streams, some mutated (a header field set
        /// to an arbitrary value, `header_len` changed, cut short, a byte
        /// flipped) and some replaced by arbitrary bytes: nothing panics, every
        /// datagram is accounted for, and no byte outside a published frame's
        /// payload changes (slot padding, payload past the longest frame a slot
        /// held, and guard bytes after the ring stay zero).
        #[test]
        fn mutated_and_arbitrary_datagrams_stay_inside_their_slots(
            frames in prop::collection::vec((0u32..3, 0u64..80, 0usize..400, 1u32..160), 1..8),
            mutations in prop::collection::vec(
                (0u8..6, any::<u32>(), any::<u16>(), prop::collection::vec(any::<u8>(), 0..120)),
                0..60,
            ),
        ) {
            const SLOTS: usize = 4;
            const CAPACITY: usize = 200;
            const GUARD: usize = 4096;
            let ring_len = ring_bytes(SLOTS, CAPACITY).unwrap();
            let mem = HostMemory::new(ring_len + GUARD).unwrap();
            let r = FrameRing::new(Box::new(mem), SLOTS, CAPACITY, OverrunPolicy::Every).unwrap();
            let mut rd = r.reader().unwrap();
            let cfg = ReassemblyConfig { restart_window: 8, max_frames_in_flight: 2, ..Default::default() };
            let mut re = Reassembler::new(cfg, r.writer().unwrap(), Arc::default());

            let mut datagrams: Vec<Vec<u8>> = Vec::new();
            for &(stream, seq, len, mp) in &frames {
                datagrams.extend(packets(stream, seq, &frame_bytes(len, seq as u8), mp));
            }
            let valid = datagrams.clone();
            for (i, (kind, value, small, bytes)) in mutations.into_iter().enumerate() {
                let mut d = valid[value as usize % valid.len()].clone();
                match kind {
                    0 => {
                        // An arbitrary 4-byte field of the header after the version.
                        let off = 8 + 4 * (small as usize % 10);
                        d[off..off + 4].copy_from_slice(&value.to_le_bytes());
                    }
                    1 => d[6..8].copy_from_slice(&small.to_le_bytes()),
                    2 => d.truncate(small as usize % (d.len() + 1)),
                    3 => {
                        let i = small as usize % d.len();
                        d[i] ^= value as u8 | 1;
                    }
                    4 => d = bytes,
                    _ => d.extend_from_slice(&bytes),
                }
                datagrams.insert((i * 7 + small as usize) % (datagrams.len() + 1), d);
            }

            let mut longest = [0usize; SLOTS];
            let mut published = 0u64;
            let drain_into = |rd: &mut RingReader, longest: &mut [usize; SLOTS]| {
                let mut n = 0;
                while let Some(slot) = rd.claim() {
                    let i = ((slot.seq - 1) % SLOTS as u64) as usize;
                    longest[i] = longest[i].max(slot.header.payload_len as usize);
                    assert!(slot.header.packets_received <= slot.header.packets_expected);
                    let seq = slot.seq;
                    rd.finish(seq);
                    n += 1;
                }
                n
            };
            for (t, d) in datagrams.iter().enumerate() {
                re.on_datagram(d, t as u64);
                published += drain_into(&mut rd, &mut longest);
            }
            re.flush(u64::MAX);
            published += drain_into(&mut rd, &mut longest);

            prop_assert!(r.memory().len() >= ring_len + GUARD);
            // SAFETY: host memory of at least `ring_len + GUARD` bytes (checked
            // above), alive while `r` is; nothing writes it while this borrow lives.
            let mem = unsafe { std::slice::from_raw_parts(r.memory().as_ptr(), ring_len + GUARD) };
            prop_assert!(mem[ring_len..].iter().all(|&b| b == 0), "guard bytes after the ring changed");
            let stride = crate::ring::layout::slot_stride(CAPACITY).unwrap();
            let slots = crate::ring::layout::SLOTS_OFFSET;
            for (i, &l) in longest.iter().enumerate() {
                let payload = slots + i * stride + crate::ring::layout::SLOT_PAYLOAD_OFFSET;
                prop_assert!(
                    mem[payload + l..slots + (i + 1) * stride].iter().all(|&b| b == 0),
                    "slot {} written past its longest frame ({} bytes)", i, l
                );
            }
            let s = snap(&re);
            prop_assert_eq!(s.datagrams, datagrams.len() as u64);
            prop_assert_eq!(s.datagrams_accounted(), s.datagrams);
            prop_assert_eq!(s.frames_complete + s.frames_incomplete, s.frames_started);
            prop_assert_eq!(s.frames_started, published);
        }
    }
}
