//! Copy delivery: one received buffer (a datagram, or a GRO buffer of
//! several) split into its datagrams and handed to the assembler and the
//! tap, with the drops made before the assembler (truncation, disallowed
//! source) and the GRO segments counted.

use super::allow::AllowList;
use super::assembler::FrameAssembler;
use super::batch::{BufferInfo, datagrams};
use super::counters::IngestCounters;
use super::tap::DatagramTap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

/// The address a tap is given for a sender the kernel did not name.
const UNKNOWN_SOURCE: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0));

/// Hands one received buffer to the assembler (and each of its datagrams to
/// the tap, addressed to `local`), counting what it drops here (truncation,
/// disallowed source) and the GRO segments. Returns how many datagrams the
/// buffer held (one when truncated).
pub(super) fn deliver<A: FrameAssembler + ?Sized>(
    assembler: &mut A,
    counters: &IngestCounters,
    allow: &AllowList,
    mut tap: Option<&mut (dyn DatagramTap + 'static)>,
    local: SocketAddr,
    buf: &[u8],
    info: BufferInfo,
) -> usize {
    if info.truncated {
        counters.datagram(buf.len());
        IngestCounters::bump(&counters.truncated);
        return 1;
    }
    let allowed = allow.allows(info.source.map(|s| s.ip()));
    if allowed {
        allow.admitted(info.source, buf);
    }
    let now_ns = info.batch_ns.max(info.rx_ns);
    let mut segments = 0u64;
    if allowed && tap.is_none() {
        // The common case: the whole buffer in one call, which counts its
        // datagrams once rather than per datagram.
        let mut each = datagrams(buf, info.gro_segment).inspect(|_| segments += 1);
        assembler.on_datagrams_at(&mut each, info.rx_ns, now_ns);
    } else {
        for d in datagrams(buf, info.gro_segment) {
            if let Some(t) = tap.as_deref_mut() {
                t.on_datagram(info.source.unwrap_or(UNKNOWN_SOURCE), local, d, info.rx_ns);
            }
            if allowed {
                assembler.on_datagram_at(d, info.rx_ns, now_ns);
            } else {
                counters.datagram(d.len());
                IngestCounters::bump(&counters.source_not_allowed);
            }
            segments += 1;
        }
    }
    if segments > 1 {
        IngestCounters::add(&counters.gro_segments, segments);
    }
    segments as usize
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::ingest::reassembly::Reassembler;
    use crate::ring::layout::{SLOT_COMPLETE, ring_bytes};
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
    use crate::wire::native::{self, NativeHeader};
    use std::sync::Arc;

    pub(in crate::ingest) fn reassembler() -> (Reassembler, RingReader) {
        let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        (Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default()), reader)
    }

    /// One frame of `len` bytes cut into `segment - HEADER_LEN` payloads,
    /// coalesced the way GRO hands it over: datagrams back to back.
    pub(in crate::ingest) fn coalesced(len: usize, segment: usize) -> (Vec<u8>, Vec<u8>) {
        coalesced_frame(len, segment, 0)
    }

    /// As [`coalesced`], for frame `frame_seq` (the same payload bytes).
    pub(in crate::ingest) fn coalesced_frame(
        len: usize,
        segment: usize,
        frame_seq: u64,
    ) -> (Vec<u8>, Vec<u8>) {
        let frame: Vec<u8> = (0..len).map(|i| (i * 7 + 1) as u8).collect();
        let max_payload = (segment - native::HEADER_LEN) as u32;
        let (count, _, _) = native::packet_span(len as u32, max_payload, 0);
        let mut buf = Vec::new();
        for i in 0..count {
            let (_, off, plen) = native::packet_span(len as u32, max_payload, i);
            let h = NativeHeader {
                packet_index: i,
                packet_count: count,
                payload_offset: off,
                frame_len: len as u32,
                frame_seq,
                ..Default::default()
            };
            buf.extend(native::encode(&h, &frame[off as usize..(off + plen) as usize]));
        }
        (buf, frame)
    }

    pub(in crate::ingest) const LOCAL: SocketAddr =
        SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 5000));

    /// A tap that keeps what it is given.
    #[derive(Default)]
    struct Collect(Vec<(SocketAddr, SocketAddr, Vec<u8>, u64)>);

    impl DatagramTap for Collect {
        fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], rx_ns: u64) {
            self.0.push((src, dst, bytes.to_vec(), rx_ns));
        }
    }

    #[test]
    fn the_tap_sees_every_split_datagram_but_not_cut_buffers() {
        let (mut r, _rd) = reassembler();
        let counters = Arc::clone(r.counters());
        let allow = AllowList::new(&["10.1.0.0/16".into()]).unwrap();
        let (buf, _) = coalesced(3000, 1048);
        let mut tap = Collect::default();
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf, info(Some(1048), "10.1.2.3"));
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf[..1048], info(None, "10.9.9.9"));
        let cut = BufferInfo { truncated: true, ..info(None, "10.1.2.3") };
        deliver(&mut r, &counters, &allow, Some(&mut tap), LOCAL, &buf[..100], cut);
        let src = |ip: &str| SocketAddr::new(ip.parse().unwrap(), 4000);
        let want: Vec<_> = buf
            .chunks(1048)
            .map(|d| (src("10.1.2.3"), LOCAL, d.to_vec(), 5))
            .chain([(src("10.9.9.9"), LOCAL, buf[..1048].to_vec(), 5)])
            .collect();
        assert_eq!(tap.0, want, "three split datagrams and the disallowed one, in order");
        let s = r.counters().snapshot();
        assert_eq!((s.packets_accepted, s.source_not_allowed, s.truncated), (3, 1, 1));
    }

    fn info(gro_segment: Option<usize>, source: &str) -> BufferInfo {
        BufferInfo {
            truncated: false,
            gro_segment,
            source: Some(SocketAddr::new(source.parse().unwrap(), 4000)),
            rx_ns: 5,
            batch_ns: 5,
        }
    }

    #[test]
    fn splits_a_coalesced_buffer_into_its_datagrams() {
        let (mut r, mut rd) = reassembler();
        let (buf, frame) = coalesced(5000, 1048);
        let counters = Arc::clone(r.counters());
        deliver(&mut r, &counters, &AllowList::default(), None, LOCAL, &buf, info(Some(1048), "10.1.2.3"));
        let s = r.counters().snapshot();
        assert_eq!((s.datagrams, s.gro_segments, s.packets_accepted, s.frames_complete), (5, 5, 5, 1));
        let slot = rd.claim().unwrap();
        assert_eq!((slot.header.flags, slot.payload), (SLOT_COMPLETE, &frame[..]));
    }

    #[test]
    fn datagram_split_edges() {
        let buf = [1u8, 2, 3, 4, 5];
        let split = |seg| datagrams(&buf, seg).collect::<Vec<_>>();
        assert_eq!(split(Some(2)), [&[1, 2][..], &[3, 4], &[5]]);
        assert_eq!(split(None), [&buf[..]]);
        assert_eq!(split(Some(0)), [&buf[..]]);
        assert_eq!(split(Some(9)), [&buf[..]]);
        assert_eq!(datagrams(&[], Some(4)).collect::<Vec<_>>(), [&[0u8; 0][..]]);
    }

    #[test]
    fn truncated_and_disallowed_buffers_are_counted() {
        let (mut r, _rd) = reassembler();
        let allow = AllowList::new(&["192.168.0.0/16".into()]).unwrap();
        let (buf, _) = coalesced(3000, 1048);
        let counters = Arc::clone(r.counters());
        deliver(&mut r, &counters, &allow, None, LOCAL, &buf, info(Some(1048), "10.0.0.1"));
        let truncated = BufferInfo { truncated: true, ..info(None, "192.168.1.1") };
        deliver(&mut r, &counters, &allow, None, LOCAL, &buf[..500], truncated);
        let s = r.counters().snapshot();
        assert_eq!((s.source_not_allowed, s.truncated, s.datagrams, s.gro_segments), (3, 1, 4, 3));
        assert_eq!(s.datagrams_accounted(), s.datagrams);
        assert_eq!(s.bytes, buf.len() as u64 + 500);
    }
}
