//! Fuzz target: any bytes as the ring descriptor an RDMA peer sends, through
//! `RingDescriptor::decode`; a descriptor that decodes must keep every slot
//! address inside the registered ring and encode back to the bytes it was read from.
//! Also decodes the consumer-state read. Seeds: `fuzz/seeds/rdma_descriptor`.
#![no_main]

use frameloop::rdma::remote::{CONSUMER_READ_BYTES, ConsumerState, RingDescriptor};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = RingDescriptor::decode(data) {
        let encoded = d.encode();
        assert_eq!(encoded[..36], data[..36]);
        assert_eq!(encoded[40..56], data[40..56]);
        let end = d.ring_addr + d.ring_len;
        for seq in [1, 2, d.slot_count as u64, d.slot_count as u64 + 1, u64::MAX] {
            let slot = d.slot_addr(seq);
            let write = d.slot_write_len(d.payload_capacity as usize).expect("a full payload fits a slot");
            assert!(slot >= d.ring_addr && slot + write as u64 <= end, "slot {seq} outside the ring");
        }
        assert!(d.slot_write_len(d.payload_capacity as usize + 1).is_none());
    }
    if let Ok(bytes) = <&[u8; CONSUMER_READ_BYTES]>::try_from(data) {
        let _ = ConsumerState::decode(bytes);
    }
});
