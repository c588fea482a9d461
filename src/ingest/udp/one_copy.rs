//! One-copy delivery (`ingest.receive_into_slots`): the shape of the next
//! landing plan, and the messages of a one-copy receive handed to the
//! assembler with their payloads already in place.

use super::UdpReceiver;
use crate::ingest::assembler::FrameAssembler;
use crate::ingest::batch::datagram_count;
use crate::ingest::counters::IngestCounters;
use crate::ingest::deliver::deliver;
use crate::ingest::landing::{Landed, LandingShape, MessageLayout};
use crate::wire::native::HEADER_LEN;

impl<A: FrameAssembler> UdpReceiver<A> {
    /// After a busy-polling thread was away from its socket (its budget ran
    /// out and it waited in epoll, or its last turn was a gap), any number
    /// of datagrams may wait: the next one-copy plan covers every receive
    /// buffer, so that none of them lands in a plain buffer for want of a
    /// planned place and is copied twice. A plan shaped after an empty read
    /// covers only a few, which is all a receiver that kept reading finds.
    /// (A receiver without a poll budget waits before nearly every read;
    /// planning the whole batch each time would cost it more than the
    /// copies it saves.)
    pub(super) fn expect_backlog(&mut self) {
        self.landing_shape.buffers = self.batch.buffers();
    }

    /// The plan to make after a receive call that returned `n` buffers, the
    /// fullest holding `fullest` datagrams: twice as many buffers and a
    /// little more. Several buffers show how the kernel cut what waited, and
    /// the next plan expects as many datagrams in each as the fullest held;
    /// one buffer only shows that it may hold more than planned (a plan's
    /// first buffer takes whatever comes, so planning it too large costs
    /// nothing).
    pub(super) fn shape_after(&self, n: usize, fullest: usize) -> LandingShape {
        let buffers = (2 * n + MIN_GROUPS).min(self.batch.buffers());
        let datagrams_per_buffer = match n {
            0 => self.landing_shape.datagrams_per_buffer,
            1 => fullest.max(self.landing_shape.datagrams_per_buffer),
            _ => fullest,
        };
        LandingShape { buffers, datagrams_per_buffer }
    }

    /// Hands the `n` messages of a one-copy receive to the assembler: first
    /// records where every message's datagrams fell (gathering the ones
    /// that did not line up) before anything is written to a slot, then
    /// delivers them in order, landed payloads in place. Returns the most
    /// datagrams one message held.
    pub(super) fn deliver_landed(&mut self, n: usize, batch_ns: u64) -> usize {
        let Some(plan) = self.assembler.landing() else { return 0 };
        self.layouts.clear();
        let mut fullest = 0;
        for i in 0..n {
            let info = self.batch.info(i, batch_ns);
            let layout = self.batch.landed(i, plan, info.gro_segment);
            match layout {
                MessageLayout::Aligned { landed, last_payload, .. } => {
                    let group = self.batch.group(i);
                    for j in 0..landed {
                        let k = group.start + j;
                        let len = if j + 1 == landed { last_payload } else { plan.target(k).len };
                        plan.set_arrived(k, len);
                    }
                }
                MessageLayout::Gather => {
                    self.batch.gather(i, plan);
                }
            }
            self.layouts.push(layout);
        }
        for i in 0..n {
            let info = self.batch.info(i, batch_ns);
            self.latest_rx_ns = self.latest_rx_ns.max(info.rx_ns);
            // What the kernel did not put in a slot goes through `deliver`: an
            // Aligned message's tail, or a Gather message's whole buffer.
            let buf = match self.layouts[i] {
                MessageLayout::Aligned { landed, tail, .. } => {
                    let group = self.batch.group(i);
                    let allowed = self.allow.allows(info.source.map(|s| s.ip()));
                    let targets = group.start..group.start + landed;
                    if allowed {
                        if let Some(k) = targets.clone().next() {
                            self.allow.admitted(info.source, self.batch.head(k).as_slice());
                        }
                        let batch = &self.batch;
                        let mut heads = targets.map(|k| (k, batch.head(k).as_slice()));
                        self.assembler.on_landed_run_at(
                            &mut heads,
                            info.rx_ns,
                            info.batch_ns.max(info.rx_ns),
                        );
                    } else {
                        for k in targets {
                            let payload = match self.assembler.landing().map(|p| p.take(k)) {
                                Some(Landed::InSlot(len)) => len,
                                _ => 0,
                            };
                            self.counters.datagram(HEADER_LEN + payload);
                            IngestCounters::bump(&self.counters.source_not_allowed);
                        }
                    }
                    // GRO segments of the whole buffer; `deliver` counts the
                    // tail's own when it holds more than one.
                    let tail_count = if tail > 0 { datagram_count(tail, info.gro_segment) } else { 0 };
                    if landed + tail_count > 1 {
                        let uncounted = landed + if tail_count == 1 { 1 } else { 0 };
                        IngestCounters::add(&self.counters.gro_segments, uncounted as u64);
                    }
                    fullest = fullest.max(landed + tail_count);
                    if tail == 0 {
                        continue;
                    }
                    self.batch.tail(i, tail)
                }
                MessageLayout::Gather => self.batch.gathered(i),
            };
            let held =
                deliver(&mut self.assembler, &self.counters, &self.allow, None, self.local_addr, buf, info);
            if matches!(self.layouts[i], MessageLayout::Gather) {
                fullest = fullest.max(held);
            }
        }
        fullest
    }
}

/// Fewest receive buffers a one-copy plan covers.
pub(super) const MIN_GROUPS: usize = 4;
