//! The sender's frame builder: datagrams parse, cover the frame exactly and
//! reassemble to the payload pattern.

use frameloop::sender::{Pattern, build_frame_datagrams};
use frameloop::wire::native::{self, FLAG_LAST_PACKET, HEADER_LEN};
use proptest::prelude::*;

/// Parses the datagrams of one frame, checks every header against the frame
/// and returns the reassembled payload.
fn reassemble(
    datagrams: &[Vec<u8>],
    stream: u32,
    seq: u64,
    frame_bytes: u64,
    packet_bytes: usize,
    ts: u64,
) -> Vec<u8> {
    let mut frame = vec![0u8; frame_bytes as usize];
    let mut next_offset = 0u64;
    for (i, d) in datagrams.iter().enumerate() {
        assert!(d.len() <= packet_bytes, "datagram {i} is {} bytes, above {packet_bytes}", d.len());
        let (h, payload) = native::parse(d).expect("every datagram parses");
        assert_eq!(d.len(), HEADER_LEN + payload.len(), "no trailing bytes");
        assert_eq!(h.stream_id, stream);
        assert_eq!(h.frame_seq, seq);
        assert_eq!(h.packet_index as usize, i);
        assert_eq!(h.packet_count as usize, datagrams.len());
        assert_eq!(h.frame_len as u64, frame_bytes);
        assert_eq!(h.sender_ts_ns, ts, "one stamp for the whole frame");
        assert_eq!(
            h.flags & FLAG_LAST_PACKET != 0,
            i + 1 == datagrams.len(),
            "only the last packet is flagged"
        );
        if i + 1 < datagrams.len() {
            assert_eq!(d.len(), packet_bytes, "only the last packet may be short");
        }
        assert_eq!(h.payload_offset as u64, next_offset, "packets are contiguous");
        assert!(!payload.is_empty());
        let at = h.payload_offset as usize;
        frame[at..at + payload.len()].copy_from_slice(payload);
        next_offset += payload.len() as u64;
    }
    assert_eq!(next_offset, frame_bytes, "the packets cover the frame exactly");
    frame
}

#[test]
fn standard_sizes_reassemble_to_the_pattern() {
    for (frame_bytes, packet_bytes, packets) in
        [(65536u64, 8972usize, 8usize), (65536, 1472, 47), (8924, 8972, 1), (8925, 8972, 2), (1, 49, 1)]
    {
        for pattern in [Pattern::Counter, Pattern::Random] {
            let ts = 1_700_000_000_000_000_000;
            let d: Vec<_> =
                build_frame_datagrams(3, 41, frame_bytes, packet_bytes, ts, pattern).unwrap().collect();
            assert_eq!(d.len(), packets, "{frame_bytes}/{packet_bytes}");
            let frame = reassemble(&d, 3, 41, frame_bytes, packet_bytes, ts);
            assert_eq!(frame, pattern.frame(3, 41, frame_bytes as usize));
        }
    }
}

#[test]
fn invalid_sizes_are_refused_with_the_flag_named() {
    let too_small = build_frame_datagrams(0, 0, 1000, 48, 0, Pattern::Counter).err().unwrap();
    assert!(too_small.to_string().contains("--packet-bytes 48"), "{too_small}");
    let empty = build_frame_datagrams(0, 0, 0, 1000, 0, Pattern::Counter).err().unwrap();
    assert!(empty.to_string().contains("--frame-bytes 0"), "{empty}");
}

proptest! {
    #[test]
    fn any_geometry_reassembles_exactly(
        frame_bytes in 1u64..150_000,
        packet_bytes in 49usize..10_000,
        stream in 0u32..4,
        seq in 0u64..1_000_000,
        random in any::<bool>(),
    ) {
        let pattern = if random { Pattern::Random } else { Pattern::Counter };
        let d: Vec<_> = build_frame_datagrams(stream, seq, frame_bytes, packet_bytes, 7, pattern).unwrap().collect();
        prop_assert_eq!(d.len() as u64, frame_bytes.div_ceil(packet_bytes as u64 - HEADER_LEN as u64));
        let frame = reassemble(&d, stream, seq, frame_bytes, packet_bytes, 7);
        prop_assert_eq!(frame, pattern.frame(stream, seq, frame_bytes as usize));
    }
}
