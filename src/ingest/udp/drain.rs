//! The copy drain: batches read off the socket until it is empty (or for
//! a bounded while), each buffer copied to the assembler by
//! [`deliver`], or received one-copy where the assembler planned landing
//! places.

use super::UdpReceiver;
use crate::clock;
use crate::ingest::assembler::FrameAssembler;
use crate::ingest::deliver::deliver;
use crate::ingest::error::IngestError;
use crate::ingest::receive_loop::{BATCHES_PER_WAKE, Drained};
use std::os::fd::AsRawFd;

impl<A: FrameAssembler> UdpReceiver<A> {
    /// Reads batches until the socket is empty (or for a bounded while).
    pub(super) fn drain(&mut self) -> Result<Drained, IngestError> {
        let fd = self.socket.as_raw_fd();
        let mut drained = Drained { buffers: 0, empty: false };
        for _ in 0..BATCHES_PER_WAKE {
            if let Some(min_payload) = self.one_copy
                && self.tap.is_none()
                && let Some(plan) = self.assembler.plan_landing(self.landing_shape, min_payload)
                && plan.groups() > 0
            {
                let n = self.batch.recv_landing(fd, plan).map_err(IngestError::Recv)?;
                drained.buffers += n;
                let fullest = if n > 0 { self.deliver_landed(n, clock::realtime_ns()) } else { 0 };
                self.landing_shape = self.shape_after(n, fullest);
                self.assembler.end_landing();
                if n < self.batch.buffers() {
                    drained.empty = true;
                    break;
                }
                continue;
            }
            let n = self.batch.recv(fd).map_err(IngestError::Recv)?;
            drained.buffers += n;
            let batch_ns = if n > 0 { clock::realtime_ns() } else { 0 };
            let mut fullest = 0;
            for i in 0..n {
                let (buf, info) = self.batch.message(i, batch_ns);
                self.latest_rx_ns = self.latest_rx_ns.max(info.rx_ns);
                let held = deliver(
                    &mut self.assembler,
                    &self.counters,
                    &self.allow,
                    self.tap.as_deref_mut(),
                    self.local_addr,
                    buf,
                    info,
                );
                fullest = fullest.max(held);
            }
            self.landing_shape = self.shape_after(n, fullest);
            if n < self.batch.buffers() {
                drained.empty = true;
                break;
            }
        }
        Ok(drained)
    }
}
