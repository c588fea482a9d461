//! Stream routing: the datagrams of one receiver shared among several frame
//! assemblers by native stream id (several `[[loop]]` tables on one UDP
//! port), each stream going to the assembler of the loop that serves it.
//!
//! Each assembler writes its own frame ring (its loop's, through the one
//! writer handle of that ring), so the router keeps the single-writer rule:
//! one receiver thread, one assembler per ring. A datagram of a stream that
//! no route serves is counted in `unknown_stream` and dropped; one without a
//! native header (too short, wrong magic) is counted by its parse error.
//! Both count in the router's counters, which should be the first route's,
//! so that every datagram counts exactly once, in one loop's counters.

use super::assembler::FrameAssembler;
use super::counters::IngestCounters;
use super::reassembly::Reassembler;
use crate::wire::native;
use std::sync::Arc;

/// The streams one assembler serves.
pub struct Route<A> {
    /// Native stream ids; a stream listed by an earlier route stays with it.
    pub streams: Vec<u32>,
    pub assembler: A,
}

/// A [`FrameAssembler`] that hands each datagram to the assembler of its stream.
pub struct StreamRouter<A: FrameAssembler = Reassembler> {
    assemblers: Vec<A>,
    /// `(stream id, index into assemblers)`, sorted by stream id, each id once.
    table: Vec<(u32, usize)>,
    /// The route of the last datagram: a stream's datagrams come in runs.
    last: Option<(u32, usize)>,
    /// Where datagrams no route takes are counted.
    counters: Arc<IngestCounters>,
    /// Datagrams of unknown streams since the start, and the last such stream
    /// (for one log line at the end; the hot path does not log).
    unknown: u64,
    last_unknown: u32,
}

impl<A: FrameAssembler> StreamRouter<A> {
    /// Routes each stream of `routes` to its assembler (a stream listed twice
    /// goes to the first route listing it; config validation refuses that),
    /// counting the datagrams that no route takes in `counters`.
    pub fn new(routes: Vec<Route<A>>, counters: Arc<IngestCounters>) -> Self {
        let mut table: Vec<(u32, usize)> = Vec::new();
        let mut assemblers = Vec::with_capacity(routes.len());
        for (i, route) in routes.into_iter().enumerate() {
            for id in route.streams {
                if !table.iter().any(|(s, _)| *s == id) {
                    table.push((id, i));
                }
            }
            assemblers.push(route.assembler);
        }
        table.sort_unstable();
        Self { assemblers, table, last: None, counters, unknown: 0, last_unknown: 0 }
    }

    /// The assemblers, in route order.
    pub fn assemblers(&self) -> &[A] {
        &self.assemblers
    }

    /// The route serving `stream`.
    fn route(&mut self, stream: u32) -> Option<usize> {
        if let Some((s, i)) = self.last
            && s == stream
        {
            return Some(i);
        }
        let i = self.table.binary_search_by_key(&stream, |e| e.0).ok().map(|k| self.table[k].1)?;
        self.last = Some((stream, i));
        Some(i)
    }

    /// Counts a datagram that no route takes.
    fn refuse(&mut self, datagram: &[u8], stream: Option<u32>) {
        self.counters.datagram(datagram.len());
        match (stream, native::parse(datagram)) {
            (None, Err(e)) => IngestCounters::bump(self.counters.parse_error(&e)),
            (Some(id), _) | (None, Ok((native::NativeHeader { stream_id: id, .. }, _))) => {
                IngestCounters::bump(&self.counters.unknown_stream);
                self.unknown += 1;
                self.last_unknown = id;
            }
        }
    }
}

impl<A: FrameAssembler> FrameAssembler for StreamRouter<A> {
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        self.on_datagram_at(datagram, rx_ns, rx_ns)
    }

    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        let Some(stream) = native::peek_stream_id(datagram) else {
            return self.refuse(datagram, None);
        };
        match self.route(stream) {
            Some(i) => self.assemblers[i].on_datagram_at(datagram, rx_ns, now_ns),
            None => self.refuse(datagram, Some(stream)),
        }
    }

    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        for a in &mut self.assemblers {
            a.on_tick_behind(stale_at, now_ns);
        }
    }

    fn flush(&mut self, now_ns: u64) {
        for a in &mut self.assemblers {
            a.flush(now_ns);
        }
        if self.unknown > 0 {
            let served: Vec<u32> = self.table.iter().map(|e| e.0).collect();
            tracing::warn!(
                "{} datagrams of streams that no loop on this port serves were dropped (the last of stream {}; \
                 served: {served:?}); add the stream to a loop's `streams` or stop sending it here",
                self.unknown,
                self.last_unknown
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::ReassemblyConfig;
    use crate::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, SlotHeader, ring_bytes};
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};

    /// A reassembler on a ring of its own, counting into counters of its own.
    fn loop_side() -> (Reassembler, RingReader, Arc<IngestCounters>) {
        let mem = HostMemory::new(ring_bytes(16, 4096).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 16, 4096, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        let counters = Arc::new(IngestCounters::default());
        let cfg = ReassemblyConfig { frame_timeout_ms: 1000, ..Default::default() };
        (Reassembler::new(cfg, ring.writer().unwrap(), Arc::clone(&counters)), reader, counters)
    }

    fn frame(stream: u32, seq: u64, len: usize) -> Vec<u8> {
        (0..len).map(|i| (i as u64 * 31 + seq * 7 + stream as u64 * 101) as u8).collect()
    }

    fn drain(reader: &mut RingReader) -> Vec<(SlotHeader, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(c) = reader.claim() {
            out.push((c.header, c.payload.to_vec()));
            let seq = c.seq;
            reader.finish(seq);
        }
        out
    }

    #[test]
    fn each_stream_reaches_its_own_ring_and_unknown_ones_are_counted() {
        let (a, mut ra, ca) = loop_side();
        let (b, mut rb, cb) = loop_side();
        let routes =
            vec![Route { streams: vec![1, 5], assembler: a }, Route { streams: vec![2], assembler: b }];
        let mut router = StreamRouter::new(routes, Arc::clone(&ca));
        // Streams 1, 2, 5 and 9 interleaved packet by packet; 9 has no route.
        let mut datagrams = Vec::new();
        for seq in 0..6u64 {
            let per_stream: Vec<Vec<Vec<u8>>> = [1u32, 2, 5, 9]
                .iter()
                .map(|&s| native::encode_frame(s, seq, &frame(s, seq, 1000 + s as usize), 300, 77))
                .collect();
            for i in 0..4 {
                for packets in &per_stream {
                    datagrams.push(packets[i].clone());
                }
            }
        }
        datagrams.push(b"not a frameloop datagram at all, and long enough to pass the size check".to_vec());
        datagrams.push(vec![0u8; 10]);
        for d in &datagrams {
            router.on_datagram(d, 1_000);
        }
        router.on_tick(2_000);
        let got_a = drain(&mut ra);
        let got_b = drain(&mut rb);
        let key = |v: &[(SlotHeader, Vec<u8>)]| {
            v.iter().map(|(h, _)| (h.stream_id, h.frame_seq)).collect::<Vec<_>>()
        };
        let want_a: Vec<_> = (0..6).flat_map(|q| [(1, q), (5, q)]).collect();
        assert_eq!(key(&got_a), want_a);
        assert_eq!(key(&got_b), (0..6).map(|q| (2, q)).collect::<Vec<_>>());
        for (h, payload) in got_a.iter().chain(&got_b) {
            assert_eq!(h.flags, SLOT_COMPLETE);
            assert_eq!(payload, &frame(h.stream_id, h.frame_seq, 1000 + h.stream_id as usize));
        }
        let (sa, sb) = (ca.snapshot(), cb.snapshot());
        assert_eq!((sa.unknown_stream, sa.bad_magic, sa.short_header), (24, 1, 1));
        assert_eq!((sb.unknown_stream, sb.datagrams, sb.packets_accepted), (0, 24, 24));
        assert_eq!(sa.datagrams, 48 + 24 + 2);
        assert_eq!(sa.datagrams + sb.datagrams, datagrams.len() as u64, "every datagram counted once");
        assert_eq!(sa.datagrams_accounted(), sa.datagrams);
        assert_eq!(sb.datagrams_accounted(), sb.datagrams);
    }

    #[test]
    fn ticks_and_the_flush_reach_every_route() {
        let (a, mut ra, ca) = loop_side();
        let (b, mut rb, _) = loop_side();
        let routes = vec![Route { streams: vec![3], assembler: a }, Route { streams: vec![4], assembler: b }];
        let mut router = StreamRouter::new(routes, ca);
        // The first packet of one frame per stream: both stay in flight until the flush.
        for s in [3u32, 4] {
            router.on_datagram(&native::encode_frame(s, 0, &frame(s, 0, 900), 300, 5)[0], 1_000);
        }
        router.on_tick(2_000);
        assert!(drain(&mut ra).is_empty() && drain(&mut rb).is_empty());
        router.flush(3_000);
        for (reader, stream) in [(&mut ra, 3), (&mut rb, 4)] {
            let got = drain(reader);
            assert_eq!(got.len(), 1, "stream {stream}");
            assert_eq!((got[0].0.stream_id, got[0].0.flags & SLOT_INCOMPLETE), (stream, SLOT_INCOMPLETE));
            assert_eq!(&got[0].1[..300], &frame(stream, 0, 900)[..300]);
        }
    }

    #[test]
    fn a_stream_listed_by_two_routes_stays_with_the_first() {
        let (a, mut ra, ca) = loop_side();
        let (b, mut rb, cb) = loop_side();
        let routes =
            vec![Route { streams: vec![7], assembler: a }, Route { streams: vec![7, 8], assembler: b }];
        let mut router = StreamRouter::new(routes, ca);
        for s in [7u32, 8] {
            for d in native::encode_frame(s, 1, &frame(s, 1, 600), 300, 5) {
                router.on_datagram(&d, 1_000);
            }
        }
        router.on_tick(2_000);
        assert_eq!(drain(&mut ra).iter().map(|(h, _)| h.stream_id).collect::<Vec<_>>(), [7]);
        assert_eq!(drain(&mut rb).iter().map(|(h, _)| h.stream_id).collect::<Vec<_>>(), [8]);
        assert_eq!(cb.snapshot().datagrams, 2);
    }
}
