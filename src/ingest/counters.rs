//! Ingest counters: lock-free totals of everything the receiver and the
//! reassembler saw, kept, published and dropped (by reason), readable from
//! any thread for metrics.
//!
//! Accounting rules (checked by the reassembly property tests):
//! - every datagram read from the socket adds one to `datagrams` (and its
//!   size to `bytes`; a GRO buffer counts once per datagram it holds);
//! - every datagram then lands in exactly one of `packets_accepted` or a
//!   per-datagram drop counter, so
//!   `datagrams == packets_accepted + sum(per-datagram drops)`, see
//!   [`IngestSnapshot::datagrams_accounted`];
//! - `frame_too_large` and `ring_full` count *frames* dropped whole (once per
//!   frame); every datagram of such a frame counts in `dropped_frame_packets`;
//! - `frames_started == frames_complete + frames_incomplete + in flight`.

use crate::wire::native::ParseError;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

/// Declares the counter set once: the atomic struct, the plain snapshot, the
/// name list and the snapshot/iteration code all come from this one list.
macro_rules! ingest_counters {
    ($( $(#[$doc:meta])* $name:ident : $class:ident ),+ $(,)?) => {
        /// Live ingest counters (one `AtomicU64` each, `Relaxed`), shared through `Arc`.
        #[derive(Debug, Default)]
        pub struct IngestCounters {
            $( $(#[$doc])* pub $name: AtomicU64, )+
        }

        /// A plain copy of [`IngestCounters`] at one moment.
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
        pub struct IngestSnapshot {
            $( $(#[$doc])* pub $name: u64, )+
        }

        /// Every counter: its name (as in [`IngestSnapshot`] and metrics) and class.
        pub const COUNTERS: &[(&str, CounterClass)] = &[ $( (stringify!($name), CounterClass::$class), )+ ];

        impl IngestCounters {
            /// Reads every counter (each read is atomic; the set is not one transaction).
            pub fn snapshot(&self) -> IngestSnapshot {
                IngestSnapshot { $( $name: self.$name.load(Ordering::Relaxed), )+ }
            }
        }

        impl IngestSnapshot {
            /// `(name, value)` for every counter, in declaration order.
            pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
                [$( self.$name, )+].into_iter().zip(COUNTERS.iter()).map(|(v, (n, _))| (*n, v))
            }
        }
    };
}

/// What a counter counts, for tables and for the accounting identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterClass {
    /// A total of traffic or frames (not a drop).
    Total,
    /// Datagrams dropped for one reason; each dropped datagram counts in exactly one of these.
    DatagramDrop,
    /// Frames dropped whole for one reason (their datagrams count in `dropped_frame_packets`).
    FrameDrop,
}

ingest_counters! {
    /// Datagrams read from the socket (GRO buffers split into their datagrams).
    datagrams: Total,
    /// Bytes of those datagrams (UDP payload, headers included).
    bytes: Total,
    /// Datagrams whose payload was written into a frame slot.
    packets_accepted: Total,
    /// Frames that got a ring slot (first valid packet seen).
    frames_started: Total,
    /// Frames published with every packet.
    frames_complete: Total,
    /// Frames published with missing packets (missing bytes zeroed).
    frames_incomplete: Total,
    /// Of `frames_incomplete`, those published because they went stale.
    frames_timed_out: Total,
    /// Datagrams that arrived inside a GRO-coalesced buffer.
    gro_segments: Total,
    /// Of `packets_accepted`, those whose payload the kernel wrote straight
    /// into its place in the slot (`ingest.receive_into_slots`: one copy).
    placed_by_kernel: Total,
    /// Streams whose frame sequence jumped outside `ingest.restart_window` (a restarted sender).
    stream_restarts: Total,
    /// Times a busy-polling receiver (`ingest.poll_budget_us`) left its
    /// socket unread for longer than 50 µs between two turns without
    /// waiting in epoll: its thread was preempted or stalled, or its own
    /// work in one turn (a long batch, publishing stale frames) took that
    /// long. A datagram that waited in the socket then waited at least as
    /// long; 0 shows the receiver kept reading.
    busy_poll_gaps: Total,
    /// Times the reading thread of `ingest.assembly_thread` found every
    /// receive batch still with the assembly thread and had to wait for
    /// one (the socket went unread meanwhile); 0 shows assembly kept up.
    assembly_waits: Total,
    /// Shorter than the native header.
    short_header: DatagramDrop,
    /// Wrong magic: not a frameloop datagram.
    bad_magic: DatagramDrop,
    /// Unsupported header version.
    bad_version: DatagramDrop,
    /// Header length field below the version-1 header size or beyond the datagram.
    bad_header_len: DatagramDrop,
    /// Fewer payload bytes than announced, or cut by the kernel (`MSG_TRUNC`).
    truncated: DatagramDrop,
    /// Packet index not below the packet count.
    bad_packet_index: DatagramDrop,
    /// Payload would cross the frame length.
    payload_outside_frame: DatagramDrop,
    /// Packet count above the frame length (min 1) or the configured cap.
    bad_packet_count: DatagramDrop,
    /// Offset or length off the frame's regular cut (see `docs/wire-format.md`).
    layout_mismatch: DatagramDrop,
    /// A packet index already received for its frame.
    duplicate: DatagramDrop,
    /// Packet count differs from the frame's first packet.
    packet_count_mismatch: DatagramDrop,
    /// Frame length differs from the frame's first packet.
    frame_len_mismatch: DatagramDrop,
    /// A packet of a frame already published.
    late: DatagramDrop,
    /// Sender not in `ingest.allow`.
    source_not_allowed: DatagramDrop,
    /// A stream that no loop on a shared port serves (`[[loop]]` `streams`).
    unknown_stream: DatagramDrop,
    /// Datagrams of frames dropped whole (`frame_too_large`, `ring_full`).
    dropped_frame_packets: DatagramDrop,
    /// Frames longer than a ring slot's payload capacity.
    frame_too_large: FrameDrop,
    /// Frames that found no free slot (the consumer fell behind: overrun).
    ring_full: FrameDrop,
}

impl IngestCounters {
    /// Adds one to `counter` (Relaxed).
    #[inline]
    pub fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds `n` to `counter` (Relaxed).
    #[inline]
    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one arriving datagram of `len` bytes.
    #[inline]
    pub fn datagram(&self, len: usize) {
        Self::bump(&self.datagrams);
        Self::add(&self.bytes, len as u64);
    }

    /// The drop counter of a parser rejection (named as [`ParseError::kind`]).
    pub fn parse_error(&self, e: &ParseError) -> &AtomicU64 {
        match e {
            ParseError::ShortHeader { .. } => &self.short_header,
            ParseError::BadMagic { .. } => &self.bad_magic,
            ParseError::BadVersion { .. } => &self.bad_version,
            ParseError::BadHeaderLen { .. } => &self.bad_header_len,
            ParseError::Truncated { .. } => &self.truncated,
            ParseError::BadPacketIndex { .. } => &self.bad_packet_index,
            ParseError::PayloadOutsideFrame { .. } => &self.payload_outside_frame,
        }
    }
}

impl IngestSnapshot {
    /// Value of the counter called `name`, if there is one.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.iter().find(|(n, _)| *n == name).map(|(_, v)| v)
    }

    /// Sum of all per-datagram drop counters.
    pub fn datagrams_dropped(&self) -> u64 {
        self.iter()
            .zip(COUNTERS)
            .filter(|(_, (_, class))| *class == CounterClass::DatagramDrop)
            .map(|((_, v), _)| v)
            .sum()
    }

    /// `packets_accepted + datagrams_dropped()`: equals `datagrams` once the
    /// receiver is idle (every datagram is either kept or dropped for one reason).
    pub fn datagrams_accounted(&self) -> u64 {
        self.packets_accepted + self.datagrams_dropped()
    }

    /// Frames dropped whole, all reasons.
    pub fn frames_dropped(&self) -> u64 {
        self.frame_too_large + self.ring_full
    }
}

/// The counts every datagram raises (`datagrams`, `bytes`,
/// `packets_accepted`, and with one-copy receive `placed_by_kernel`), held
/// by the one reassembler that raises them and added to its
/// [`IngestCounters`] by [`PendingCounts::flush_into`], one atomic add
/// each, before each publication and at the end of each call into the
/// reassembler. A locked add per datagram would make the
/// receiving thread wait, datagram after datagram, for the stores of the
/// payload it just copied to reach the cache.
#[derive(Debug, Default)]
pub(crate) struct PendingCounts {
    datagrams: u64,
    bytes: u64,
    accepted: u64,
    placed_by_kernel: u64,
}

impl PendingCounts {
    /// One arriving datagram of `len` bytes.
    #[inline]
    pub(crate) fn datagram(&mut self, len: usize) {
        self.datagrams += 1;
        self.bytes += len as u64;
    }

    /// One packet accepted into its frame.
    #[inline]
    pub(crate) fn accepted(&mut self) {
        self.accepted += 1;
    }

    /// One payload the kernel put where it belongs.
    #[inline]
    pub(crate) fn placed_by_kernel(&mut self) {
        self.placed_by_kernel += 1;
    }

    /// Adds what is pending to `counters` and starts over from zero.
    #[inline]
    pub(crate) fn flush_into(&mut self, counters: &IngestCounters) {
        if self.datagrams != 0 {
            IngestCounters::add(&counters.datagrams, self.datagrams);
            IngestCounters::add(&counters.bytes, self.bytes);
        }
        if self.accepted != 0 {
            IngestCounters::add(&counters.packets_accepted, self.accepted);
        }
        if self.placed_by_kernel != 0 {
            IngestCounters::add(&counters.placed_by_kernel, self.placed_by_kernel);
        }
        *self = Self::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::native::{self, NativeHeader};

    #[test]
    fn every_parse_error_kind_has_a_counter_of_its_name() {
        let good = native::encode(
            &NativeHeader { packet_count: 1, frame_len: 4, payload_len: 4, ..Default::default() },
            &[1, 2, 3, 4],
        );
        let mut errors = vec![native::parse(&good[..10]).unwrap_err()];
        for (at, byte) in [(0, b'X'), (4, 9), (6, 1)] {
            let mut d = good.clone();
            d[at] = byte;
            errors.push(native::parse(&d).unwrap_err());
        }
        errors.push(native::parse(&good[..good.len() - 1]).unwrap_err());
        errors.push(native::ParseError::BadPacketIndex { index: 1, count: 1 });
        errors.push(native::ParseError::PayloadOutsideFrame { offset: 1, len: 4, frame_len: 4 });
        let c = IngestCounters::default();
        for (i, e) in errors.iter().enumerate() {
            IngestCounters::bump(c.parse_error(e));
            let snap = c.snapshot();
            assert_eq!(snap.get(e.kind()), Some(1), "counter {} after {e}", e.kind());
            assert_eq!(snap.datagrams_dropped(), i as u64 + 1);
        }
    }

    #[test]
    fn names_are_unique_and_iteration_matches_fields() {
        let c = IngestCounters::default();
        c.datagram(100);
        IngestCounters::add(&c.ring_full, 3);
        IngestCounters::bump(&c.late);
        IngestCounters::bump(&c.packets_accepted);
        let s = c.snapshot();
        let pairs: Vec<_> = s.iter().collect();
        assert_eq!(pairs.len(), COUNTERS.len());
        let mut names: Vec<_> = pairs.iter().map(|(n, _)| *n).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNTERS.len());
        assert_eq!(s.get("bytes"), Some(100));
        assert_eq!(s.get("ring_full"), Some(3));
        assert_eq!(s.get("nonexistent"), None);
        // ring_full is a frame drop: it does not count datagrams.
        assert_eq!(s.datagrams_dropped(), 1);
        assert_eq!(s.datagrams_accounted(), 2);
        assert_eq!(s.frames_dropped(), 3);
        let json = serde_json::to_value(s).unwrap();
        assert_eq!(json["late"], 1);
    }
}
