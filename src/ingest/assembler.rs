//! The frame assembler the UDP receiver feeds ([`FrameAssembler`]): the
//! interface every datagram format implements to turn datagrams into
//! published frame-ring slots. Ingest implements it for native reassembly
//! ([`Reassembler`]); other formats implement it where they live (RFC 4175
//! RTP video in `rtp/`), so ingest depends on none of them. Every
//! implementation is a pure state machine (no I/O, no clock reads).

use super::landing::{LandingPlan, LandingShape};
use super::reassembly::Reassembler;

/// Turns datagrams into published frame-ring slots. Every time is an
/// argument (CLOCK_REALTIME ns), so the receiver owns the clock.
pub trait FrameAssembler: Send {
    /// Handles one datagram received at `rx_ns` (also the current time).
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64);
    /// As [`FrameAssembler::on_datagram`], for a datagram received at `rx_ns`
    /// and handled at `now_ns`: frames it completes are published at `now_ns`.
    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        let _ = now_ns;
        self.on_datagram(datagram, rx_ns)
    }
    /// As [`FrameAssembler::on_datagram_at`] for each datagram of one
    /// receive buffer (all received at `rx_ns`, handled at `now_ns`).
    fn on_datagrams_at(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>, rx_ns: u64, now_ns: u64) {
        for datagram in datagrams {
            self.on_datagram_at(datagram, rx_ns, now_ns);
        }
    }
    /// One-copy receive: plans where the datagrams (of at least
    /// `min_payload` payload bytes) of the receive buffers `shape` says are
    /// expected to go ([`Reassembler::plan_landing`]);
    /// `None` (the default) when this assembler does not predict.
    fn plan_landing(&mut self, shape: LandingShape, min_payload: usize) -> Option<&mut LandingPlan> {
        let _ = (shape, min_payload);
        None
    }
    /// The plan [`FrameAssembler::plan_landing`] returned last, if any.
    fn landing(&mut self) -> Option<&mut LandingPlan> {
        None
    }
    /// Handles the datagram whose header is `head` and whose payload landed
    /// at target `k` of the last plan ([`Reassembler::on_landed_at`]).
    fn on_landed_at(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        let _ = (k, head, rx_ns, now_ns);
        debug_assert!(false, "a datagram landed for an assembler that planned nothing");
    }
    /// As [`FrameAssembler::on_landed_at`] for each `(target, header)` of
    /// one receive buffer's landed datagrams, in order.
    fn on_landed_run_at(
        &mut self,
        landed: &mut dyn Iterator<Item = (usize, &[u8])>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        for (k, head) in landed {
            self.on_landed_at(k, head, rx_ns, now_ns);
        }
    }
    /// Forgets the last plan.
    fn end_landing(&mut self) {}
    /// The tick of a receiver with datagrams still waiting: frames go stale
    /// by `stale_at` (the arrival time of the latest datagram handled), not
    /// by the clock, so no frame is timed out while packets of it that
    /// arrived in time wait behind the receiver; what is published is
    /// published at `now_ns`.
    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64);
    /// Publishes what is complete or stale at `now_ns`, for a receiver that
    /// has read every datagram waiting for it.
    fn on_tick(&mut self, now_ns: u64) {
        self.on_tick_behind(now_ns, now_ns)
    }
    /// Publishes everything in flight (incomplete frames flagged) at `now_ns`.
    fn flush(&mut self, now_ns: u64);
}

impl FrameAssembler for Reassembler {
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        Reassembler::on_datagram(self, datagram, rx_ns)
    }
    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        Reassembler::on_datagram_at(self, datagram, rx_ns, now_ns)
    }
    fn on_datagrams_at(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>, rx_ns: u64, now_ns: u64) {
        Reassembler::on_datagrams_at(self, datagrams, rx_ns, now_ns)
    }
    fn plan_landing(&mut self, shape: LandingShape, min_payload: usize) -> Option<&mut LandingPlan> {
        Some(Reassembler::plan_landing(self, shape, min_payload))
    }
    fn landing(&mut self) -> Option<&mut LandingPlan> {
        Some(self.landing_mut())
    }
    fn on_landed_at(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        Reassembler::on_landed_at(self, k, head, rx_ns, now_ns)
    }
    fn on_landed_run_at(
        &mut self,
        landed: &mut dyn Iterator<Item = (usize, &[u8])>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        Reassembler::on_landed_run_at(self, landed, rx_ns, now_ns)
    }
    fn end_landing(&mut self) {
        Reassembler::end_landing(self)
    }
    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        Reassembler::on_tick_behind(self, stale_at, now_ns)
    }
    fn flush(&mut self, now_ns: u64) {
        Reassembler::flush(self, now_ns)
    }
}

impl<A: FrameAssembler + ?Sized> FrameAssembler for Box<A> {
    fn on_datagram(&mut self, datagram: &[u8], rx_ns: u64) {
        (**self).on_datagram(datagram, rx_ns)
    }
    fn on_datagram_at(&mut self, datagram: &[u8], rx_ns: u64, now_ns: u64) {
        (**self).on_datagram_at(datagram, rx_ns, now_ns)
    }
    fn on_datagrams_at(&mut self, datagrams: &mut dyn Iterator<Item = &[u8]>, rx_ns: u64, now_ns: u64) {
        (**self).on_datagrams_at(datagrams, rx_ns, now_ns)
    }
    fn plan_landing(&mut self, shape: LandingShape, min_payload: usize) -> Option<&mut LandingPlan> {
        (**self).plan_landing(shape, min_payload)
    }
    fn landing(&mut self) -> Option<&mut LandingPlan> {
        (**self).landing()
    }
    fn on_landed_at(&mut self, k: usize, head: &[u8], rx_ns: u64, now_ns: u64) {
        (**self).on_landed_at(k, head, rx_ns, now_ns)
    }
    fn on_landed_run_at(
        &mut self,
        landed: &mut dyn Iterator<Item = (usize, &[u8])>,
        rx_ns: u64,
        now_ns: u64,
    ) {
        (**self).on_landed_run_at(landed, rx_ns, now_ns)
    }
    fn end_landing(&mut self) {
        (**self).end_landing()
    }
    fn on_tick_behind(&mut self, stale_at: u64, now_ns: u64) {
        (**self).on_tick_behind(stale_at, now_ns)
    }
    fn flush(&mut self, now_ns: u64) {
        (**self).flush(now_ns)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ingest::ReassemblyConfig;
    use crate::ring::layout::{SLOT_COMPLETE, SLOT_INCOMPLETE, ring_bytes};
    use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
    use crate::wire::native::{self, NativeHeader};
    use std::sync::Arc;

    pub(crate) fn ring(capacity: usize) -> Arc<FrameRing> {
        let mem = HostMemory::new(ring_bytes(4, capacity).unwrap()).unwrap();
        FrameRing::new(Box::new(mem), 4, capacity, OverrunPolicy::Every).unwrap()
    }

    /// Feeds `datagrams` through the trait object, then a tick and a flush,
    /// and returns the flags and payloads published.
    pub(crate) fn drive(
        a: &mut dyn FrameAssembler,
        reader: &mut RingReader,
        datagrams: &[Vec<u8>],
    ) -> Vec<(u32, Vec<u8>)> {
        for d in datagrams {
            a.on_datagram(d, 1_000);
        }
        a.on_tick(2_000);
        a.flush(3_000);
        let mut out = Vec::new();
        while let Some(c) = reader.claim() {
            out.push((c.header.flags, c.payload.to_vec()));
            let seq = c.seq;
            reader.finish(seq);
        }
        out
    }

    #[test]
    fn native_reassembler_through_the_trait() {
        let r = ring(64);
        let mut reader = r.reader().unwrap();
        let re = Reassembler::new(ReassemblyConfig::default(), r.writer().unwrap(), Arc::default());
        let mut boxed: Box<dyn FrameAssembler> = Box::new(re);
        let frame: Vec<u8> = (0..40u8).collect();
        let h = |i: u32| NativeHeader {
            frame_seq: 7,
            packet_index: i,
            packet_count: 2,
            payload_offset: i * 20,
            frame_len: 40,
            ..Default::default()
        };
        let whole = [native::encode(&h(0), &frame[..20]), native::encode(&h(1), &frame[20..])];
        // The second frame lacks its last packet: the flush publishes it incomplete.
        let partial = [native::encode(&NativeHeader { frame_seq: 8, ..h(0) }, &frame[..20])];
        let out = drive(&mut boxed, &mut reader, &[whole[0].clone(), whole[1].clone(), partial[0].clone()]);
        assert_eq!(out.len(), 2);
        assert_eq!(out[0], (SLOT_COMPLETE, frame.clone()));
        assert_eq!(out[1].0 & SLOT_INCOMPLETE, SLOT_INCOMPLETE);
        assert_eq!(&out[1].1[..20], &frame[..20]);
        assert_eq!(&out[1].1[20..], &[0u8; 20]);
    }
}
