//! The emulated HSB sensor bridge's receiving side: [`HsbDma`] writes the
//! frames of HSB datagrams (`wire::hsb`) into the frame ring the way the
//! bridge's DMA engine writes GPU memory, and [`HsbReceiver`] feeds it from
//! a UDP socket.
//!
//! Frame `counter` goes to slot `(counter - 1) % slots`: its payload at the
//! slot's payload offset, then, after the frame's last byte, the slot's first
//! metadata words, big-endian: word 1 the frame length, word 2 the status
//! ([`STATUS_TRUNCATED`] when datagrams were missing; their bytes are zero),
//! and word 0 the counter, last, with release ordering. Nothing else is
//! written: the ring's head sequence stays 0, so only a data-ready handler
//! that reads these words (`handlers/hsb_ready.cu`) finds the frames.
//!
//! A datagram that is malformed, lies about its sizes, does not fit a slot
//! or belongs to an older frame is counted and dropped; nothing is written
//! outside the slot.

use crate::ring::FrameRing;
use crate::ring::layout::{SLOT_PAYLOAD_OFFSET, SLOTS_OFFSET};
use crate::wire::hsb;
use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering, fence};
use std::time::{Duration, Instant};
use thiserror::Error;

/// Metadata word of the frame counter (written last).
const META_COUNTER: usize = 0;
/// Metadata word of the frame length in bytes.
const META_LENGTH: usize = 1;
/// Metadata word of the status.
const META_STATUS: usize = 2;
/// Status bit: datagrams of the frame were missing (their bytes are zero).
pub const STATUS_TRUNCATED: u32 = 1;

/// How long the receiver waits for the rest of a frame before writing it as
/// truncated when no newer frame arrives.
const FLUSH_IDLE: Duration = Duration::from_millis(20);
/// How long one receive call blocks (the stop flag is checked in between).
const RECV_TIMEOUT: Duration = Duration::from_millis(5);

/// `ingest.format`: what the UDP receiver makes of datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IngestFormat {
    /// frameloop's native datagrams (or RFC 4175 RTP with `[rtp]`),
    /// reassembled and published with the ring's head sequence.
    #[default]
    Native,
    /// HSB datagrams (`frameloop send --format hsb`), written into the ring
    /// like the bridge's DMA engine: no head sequence, so it needs a
    /// `[handler]` that reads the slots' metadata (`handlers/hsb_ready.cu`).
    Hsb,
}

/// Why the emulated DMA engine or its receiver cannot start.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum HsbIngestError {
    /// The frame ring already has a writer; give the HSB emulation a ring of its own.
    #[error("the frame ring already has a writer; the HSB DMA emulation must be its only writer")]
    WriterTaken,
    /// The frame ring is in device-only memory; use mapped or host ring memory with HSB ingest.
    #[error(
        "the frame ring is in device-only memory; the HSB DMA emulation writes host-addressable ring memory (mapped or host)"
    )]
    DeviceOnly,
    /// The HSB receiver's address cannot be bound; check `ingest.listen` (an address of this host,
    /// a free port).
    #[error(
        "cannot bind the HSB receiver to {addr}: {source}; check ingest.listen (address on this host, port free)"
    )]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// What the DMA emulation did with the datagrams it was given.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HsbCounters {
    /// Datagrams whose bytes were written.
    pub datagrams: u64,
    /// Frames written with every byte.
    pub frames_complete: u64,
    /// Frames written with missing bytes (status bit set), including frames
    /// of which no datagram arrived, written empty so the handler moves on.
    pub frames_truncated: u64,
    /// Datagrams dropped: not HSB, or lying about offsets and lengths.
    pub malformed: u64,
    /// Datagrams dropped: their frame is larger than a ring slot.
    pub too_large: u64,
    /// Datagrams dropped: their frame was already written (late or duplicate)
    /// or announced another length than its first datagram.
    pub stale: u64,
}

/// The frame being assembled.
#[derive(Debug)]
struct PendingFrame {
    counter: u32,
    frame_len: u32,
    /// Byte ranges received, sorted, disjoint and not touching.
    received: Vec<(u32, u32)>,
    /// No datagram of the frame arrived: written empty and truncated.
    lost: bool,
}

impl PendingFrame {
    fn add(&mut self, start: u32, end: u32) {
        if start == end {
            return;
        }
        let (mut s, mut e) = (start, end);
        self.received.retain(|&(a, b)| {
            if b < s || a > e {
                return true;
            }
            s = s.min(a);
            e = e.max(b);
            false
        });
        let at = self.received.partition_point(|&(a, _)| a < s);
        self.received.insert(at, (s, e));
    }

    fn is_complete(&self) -> bool {
        !self.lost && (self.frame_len == 0 || self.received == [(0, self.frame_len)])
    }

    /// The byte ranges not received.
    fn gaps(&self) -> Vec<(u32, u32)> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for &(a, b) in &self.received {
            if a > at {
                gaps.push((at, a));
            }
            at = b;
        }
        if at < self.frame_len {
            gaps.push((at, self.frame_len));
        }
        gaps
    }
}

/// The ring's slots as the DMA engine sees them: bounds-checked writes of
/// payload bytes and atomic stores of metadata words.
struct SlotMemory {
    /// Invariant: host-addressable (checked in [`HsbDma::new`]), laid out by
    /// `FrameRing::new`, so every slot `< slot_count` of `stride` bytes lies
    /// inside its memory, 256-byte aligned.
    ring: Arc<FrameRing>,
}

impl SlotMemory {
    fn slot_base(&self, slot: usize) -> *mut u8 {
        assert!(slot < self.ring.slot_count(), "slot {slot} is outside the ring");
        // SAFETY: slot < slot_count (asserted), so the offset lies inside the
        // ring's allocation (struct invariant).
        unsafe { self.ring.memory().as_ptr().add(SLOTS_OFFSET + slot * self.ring.slot_stride()) }
    }

    /// Copies `bytes` to payload offset `offset` of `slot`.
    fn write(&self, slot: usize, offset: usize, bytes: &[u8]) {
        let end = offset.checked_add(bytes.len()).expect("offset + length overflows");
        assert!(end <= self.ring.payload_capacity(), "write past the slot's payload");
        // SAFETY: [offset, end) lies inside the slot's payload (asserted); the
        // ring's only writer is the HsbDma holding this (the writer side was
        // taken in HsbDma::new); the GPU only reads this memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.slot_base(slot).add(SLOT_PAYLOAD_OFFSET + offset),
                bytes.len(),
            )
        };
    }

    /// Zeroes payload bytes `[start, end)` of `slot`.
    fn zero(&self, slot: usize, start: usize, end: usize) {
        assert!(start <= end && end <= self.ring.payload_capacity(), "zeroing past the slot's payload");
        // SAFETY: as in `write`: the range lies inside the slot's payload.
        unsafe {
            std::ptr::write_bytes(self.slot_base(slot).add(SLOT_PAYLOAD_OFFSET + start), 0, end - start)
        };
    }

    /// Metadata word `word` of `slot`.
    fn meta(&self, slot: usize, word: usize) -> &AtomicU32 {
        assert!(word * 4 < SLOT_PAYLOAD_OFFSET, "metadata word {word} is in the payload");
        // SAFETY: the word lies in the slot's first 128 bytes (asserted),
        // 4-byte aligned (slots are 256-byte aligned); an AtomicU32 has the
        // layout of a u32 and the memory lives as long as `self.ring`.
        unsafe { &*(self.slot_base(slot).add(word * 4) as *const AtomicU32) }
    }
}

/// The emulated DMA engine: the frame ring's single writer, placing frames
/// from HSB datagrams (pure: no I/O, no clock).
pub struct HsbDma {
    slots: SlotMemory,
    pending: Option<PendingFrame>,
    /// Counter of the newest frame written (0: none yet).
    last_written: u32,
    counters: HsbCounters,
}

impl HsbDma {
    /// Takes the writer side of `ring` (a host-addressable ring).
    pub fn new(ring: Arc<FrameRing>) -> Result<Self, HsbIngestError> {
        if ring.is_device_only() || !ring.memory().is_host_addressable() {
            return Err(HsbIngestError::DeviceOnly);
        }
        if !ring.take_writer_for_remote() {
            return Err(HsbIngestError::WriterTaken);
        }
        Ok(Self {
            slots: SlotMemory { ring },
            pending: None,
            last_written: 0,
            counters: HsbCounters::default(),
        })
    }

    pub fn counters(&self) -> HsbCounters {
        self.counters
    }

    /// The slot frame `counter` goes to.
    fn slot_of(&self, counter: u32) -> usize {
        debug_assert!(counter != 0);
        (counter - 1) as usize % self.slots.ring.slot_count()
    }

    /// True when `counter` is not newer than `than` (serial-number order).
    fn not_newer(counter: u32, than: u32) -> bool {
        than != 0 && (counter.wrapping_sub(than) as i32) <= 0
    }

    /// Takes one datagram.
    pub fn on_datagram(&mut self, datagram: &[u8]) {
        let (h, payload) = match hsb::parse(datagram) {
            Ok(parsed) => parsed,
            Err(_) => {
                self.counters.malformed += 1;
                return;
            }
        };
        if h.frame_len as usize > self.slots.ring.payload_capacity() {
            self.counters.too_large += 1;
            return;
        }
        if self.pending.as_ref().is_some_and(|p| p.counter != h.counter) {
            let newer = self.pending.as_ref().is_some_and(|p| !Self::not_newer(h.counter, p.counter));
            if !newer {
                self.counters.stale += 1;
                return;
            }
            self.flush();
        }
        if self.pending.is_none() {
            if Self::not_newer(h.counter, self.last_written) {
                self.counters.stale += 1;
                return;
            }
            self.skip_to(h.counter);
            self.begin(h.counter, h.frame_len, false);
        }
        let Some(p) = self.pending.as_mut() else { return };
        if p.frame_len != h.frame_len {
            self.counters.stale += 1;
            return;
        }
        // parse() checked offset + payload <= frame_len <= the slot's capacity.
        let slot = (h.counter - 1) as usize % self.slots.ring.slot_count();
        self.slots.write(slot, h.offset as usize, payload);
        p.add(h.offset, h.offset + payload.len() as u32);
        self.counters.datagrams += 1;
        if p.is_complete() {
            self.finish();
        }
    }

    /// Writes the pending frame, if any, with its missing bytes zeroed and
    /// the truncated status (no more of its datagrams are expected).
    pub fn flush(&mut self) {
        if self.pending.is_some() {
            self.finish();
        }
    }

    /// Starts frame `counter` of `frame_len` bytes: invalidates its slot's
    /// counter before the payload is overwritten.
    fn begin(&mut self, counter: u32, frame_len: u32, lost: bool) {
        let slot = self.slot_of(counter);
        self.slots.meta(slot, META_COUNTER).store(0, Ordering::Relaxed);
        // The payload stores below must not become visible before the 0.
        fence(Ordering::SeqCst);
        self.pending = Some(PendingFrame { counter, frame_len, received: Vec::new(), lost });
    }

    /// Writes frames of which nothing arrived between the last one written
    /// and `counter` as empty and truncated (the newest `slots` of them at
    /// most), so that a handler waiting on their slots moves on.
    fn skip_to(&mut self, counter: u32) {
        if self.last_written == 0 {
            return;
        }
        let missing = counter.wrapping_sub(self.last_written).wrapping_sub(1);
        let fill = missing.min(self.slots.ring.slot_count() as u32);
        let mut c = counter;
        let mut lost = Vec::with_capacity(fill as usize);
        for _ in 0..fill {
            c = c.wrapping_sub(1);
            if c == 0 {
                c = u32::MAX;
            }
            lost.push(c);
        }
        for c in lost.into_iter().rev() {
            self.begin(c, 0, true);
            self.finish();
        }
    }

    /// Zeroes the pending frame's gaps, then writes length, status and,
    /// last with release ordering, the counter.
    fn finish(&mut self) {
        let Some(p) = self.pending.take() else { return };
        let slot = self.slot_of(p.counter);
        let complete = p.is_complete();
        for (a, b) in p.gaps() {
            self.slots.zero(slot, a as usize, b as usize);
        }
        let status = if complete { 0 } else { STATUS_TRUNCATED };
        self.slots.meta(slot, META_LENGTH).store(p.frame_len.to_be(), Ordering::Relaxed);
        self.slots.meta(slot, META_STATUS).store(status.to_be(), Ordering::Relaxed);
        self.slots.meta(slot, META_COUNTER).store(p.counter.to_be(), Ordering::Release);
        if complete {
            self.counters.frames_complete += 1;
        } else {
            self.counters.frames_truncated += 1;
        }
        self.last_written = p.counter;
    }
}

/// The emulated bridge's UDP receiver: datagrams off a socket into an [`HsbDma`].
pub struct HsbReceiver {
    socket: UdpSocket,
    dma: HsbDma,
}

impl HsbReceiver {
    /// Binds `listen` (port 0: any free port).
    pub fn bind(listen: SocketAddr, dma: HsbDma) -> Result<Self, HsbIngestError> {
        let bind = |source| HsbIngestError::Bind { addr: listen, source };
        let socket = UdpSocket::bind(listen).map_err(bind)?;
        socket.set_read_timeout(Some(RECV_TIMEOUT)).map_err(bind)?;
        Ok(Self { socket, dma })
    }

    /// The bound address (to send to).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Receives until `stop` is raised; a frame whose datagrams stop coming
    /// is written as truncated after a short idle time. Returns the counters.
    pub fn run(mut self, stop: &AtomicBool) -> HsbCounters {
        let mut buf = vec![0u8; 65_536];
        let mut last_datagram = Instant::now();
        while !stop.load(Ordering::Relaxed) {
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    self.dma.on_datagram(&buf[..n]);
                    last_datagram = Instant::now();
                }
                Err(e)
                    if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) =>
                {
                    if last_datagram.elapsed() >= FLUSH_IDLE {
                        self.dma.flush();
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // An ICMP error queued on the socket, for example: not fatal.
                    tracing::debug!("HSB receiver: {e}");
                }
            }
        }
        self.dma.flush();
        self.dma.counters()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_ranges_merge_and_leave_the_gaps() {
        let mut p = PendingFrame { counter: 1, frame_len: 30, received: Vec::new(), lost: false };
        p.add(10, 20);
        p.add(0, 5);
        p.add(15, 25);
        assert_eq!(p.received, [(0, 5), (10, 25)]);
        assert_eq!(p.gaps(), [(5, 10), (25, 30)]);
        assert!(!p.is_complete());
        p.add(5, 10);
        p.add(25, 30);
        assert!(p.is_complete(), "{:?}", p.received);
        assert!(p.gaps().is_empty());
    }
}
