//! The emulated HSB sensor bridge without a GPU: the receiving side writes
//! ring memory exactly as `handlers/hsb_ready.cu` expects it (payload in slot
//! `(counter - 1) % slots`, big-endian length, status and counter words at
//! the slot's start, no head sequence) for in-order, reordered and lossy
//! input and for datagrams that lie about their sizes; and the sender mode
//! feeds the receiver over loopback.

use frameloop::ingest::hsb::{HsbCounters, HsbDma, HsbIngestError, HsbReceiver, STATUS_TRUNCATED};
use frameloop::ring::layout::{SLOT_PAYLOAD_OFFSET, SLOTS_OFFSET, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::sender::hsb::{SendFormat, hsb_counter, hsb_frame_payload, run_hsb_sender};
use frameloop::sender::{GsoMode, Pattern, SendArgs, SendError};
use frameloop::wire::hsb::{self, HEADER_LEN, HsbHeader};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

const SLOTS: usize = 4;
const CAPACITY: usize = 4096;

fn ring() -> Arc<FrameRing> {
    let mem = HostMemory::new(ring_bytes(SLOTS, CAPACITY).unwrap()).unwrap();
    FrameRing::new(Box::new(mem), SLOTS, CAPACITY, OverrunPolicy::Every).unwrap()
}

/// A copy of the ring's memory.
fn snapshot(ring: &FrameRing) -> Vec<u8> {
    let mem = ring.memory();
    // SAFETY: host-addressable memory of `len()` bytes that lives as long as
    // `ring`; nothing writes it while the test reads (the writer runs on this
    // thread, or has been joined).
    unsafe { std::slice::from_raw_parts(mem.as_ptr(), mem.len()) }.to_vec()
}

/// What a slot holds: (counter, length, status) decoded from big-endian, and the payload.
struct Slot {
    meta_bytes: [u8; 12],
    counter: u32,
    length: u32,
    status: u32,
    payload: Vec<u8>,
}

fn slot(ring: &FrameRing, index: usize) -> Slot {
    let mem = snapshot(ring);
    let base = SLOTS_OFFSET + index * ring.slot_stride();
    let meta_bytes: [u8; 12] = mem[base..base + 12].try_into().unwrap();
    let be = |i: usize| u32::from_be_bytes(meta_bytes[i * 4..i * 4 + 4].try_into().unwrap());
    let payload = mem[base + SLOT_PAYLOAD_OFFSET..base + SLOT_PAYLOAD_OFFSET + CAPACITY].to_vec();
    Slot { meta_bytes, counter: be(0), length: be(1), status: be(2), payload }
}

fn frame(counter: u32, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u32).wrapping_mul(31).wrapping_add(counter * 7) as u8).collect()
}

/// Checks that `counter`'s slot holds `bytes` as a complete frame.
fn assert_complete(ring: &FrameRing, counter: u32, bytes: &[u8]) {
    let s = slot(ring, (counter as usize - 1) % SLOTS);
    assert_eq!(s.counter, counter, "counter word of frame {counter}");
    assert_eq!(s.length as usize, bytes.len(), "length word of frame {counter}");
    assert_eq!(s.status, 0, "status word of frame {counter}");
    assert_eq!(&s.payload[..bytes.len()], bytes, "payload of frame {counter}");
}

#[test]
fn in_order_frames_land_in_their_slots_with_big_endian_metadata_and_no_head() {
    let ring = ring();
    let mut dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    let lens = [1000, 4096, 1, 2500, 300, 999];
    for (i, &len) in lens.iter().enumerate() {
        let counter = i as u32 + 1;
        for d in hsb::encode_frame(counter, &frame(counter, len), 700) {
            dma.on_datagram(&d);
        }
    }
    // Six frames in four slots: frames 3..6 are still there.
    for (i, &len) in lens.iter().enumerate().skip(2) {
        assert_complete(&ring, i as u32 + 1, &frame(i as u32 + 1, len));
    }
    // The words are big-endian in memory: frame 5 (slot 0), 300 bytes.
    assert_eq!(slot(&ring, 0).meta_bytes, [0, 0, 0, 5, 0, 0, 0x01, 0x2c, 0, 0, 0, 0]);
    assert_eq!(ring.head(), 0, "the DMA engine never publishes the head sequence");
    let c = dma.counters();
    assert_eq!((c.frames_complete, c.frames_truncated, c.malformed, c.stale), (6, 0, 0, 0));
    assert_eq!(c.datagrams, lens.iter().map(|l: &usize| l.div_ceil(700) as u64).sum::<u64>());
}

#[test]
fn datagrams_reordered_inside_a_frame_still_make_a_complete_frame() {
    let ring = ring();
    let mut dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    for counter in 1..=3u32 {
        let bytes = frame(counter, 3000);
        let mut ds = hsb::encode_frame(counter, &bytes, 512);
        // Last first, then the rest backwards with one duplicate.
        ds.reverse();
        ds.insert(3, ds[1].clone());
        for d in &ds {
            dma.on_datagram(d);
        }
        assert_complete(&ring, counter, &bytes);
    }
    assert_eq!(dma.counters().frames_complete, 3);
    assert_eq!(dma.counters().frames_truncated, 0);
}

#[test]
fn lost_datagrams_are_zeroed_and_flagged_and_lost_frames_written_empty() {
    let ring = ring();
    let mut dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    // Frame 1 fills slot 0 with non-zero bytes.
    for d in hsb::encode_frame(1, &[0xaa; 2048], 512) {
        dma.on_datagram(&d);
    }
    // Frame 5 goes to slot 0 too; its second datagram is lost.
    let bytes = frame(5, 2048);
    let ds = hsb::encode_frame(5, &bytes, 512);
    // Frames 2..4 never arrive at all.
    for (i, d) in ds.iter().enumerate() {
        if i != 1 {
            dma.on_datagram(d);
        }
    }
    // Nothing says frame 5 is over until the next frame (or an idle flush).
    assert_eq!(slot(&ring, 0).counter, 0, "a slot being rewritten has no valid counter");
    for d in hsb::encode_frame(6, &frame(6, 100), 512) {
        dma.on_datagram(&d);
    }
    let s = slot(&ring, 0);
    assert_eq!((s.counter, s.length, s.status), (5, 2048, STATUS_TRUNCATED));
    assert_eq!(&s.payload[..512], &bytes[..512]);
    assert!(s.payload[512..1024].iter().all(|&b| b == 0), "missing bytes are zero");
    assert_eq!(&s.payload[1024..2048], &bytes[1024..2048]);
    // Frames 2..4: written empty and truncated, so a handler waiting on
    // their slots moves on (frame 2's slot now holds frame 6).
    for counter in 3..=4u32 {
        let s = slot(&ring, counter as usize - 1);
        assert_eq!((s.counter, s.length, s.status), (counter, 0, STATUS_TRUNCATED), "frame {counter}");
    }
    assert_complete(&ring, 6, &frame(6, 100));
    // A late datagram of frame 5 is stale and changes nothing.
    let before = snapshot(&ring);
    dma.on_datagram(&ds[1]);
    assert_eq!(snapshot(&ring), before);
    let c = dma.counters();
    assert_eq!((c.frames_complete, c.frames_truncated, c.stale), (2, 4, 1), "{c:?}");
    // flush() ends a frame whose last datagram never comes.
    let ds = hsb::encode_frame(7, &frame(7, 1000), 512);
    dma.on_datagram(&ds[0]);
    dma.flush();
    let s = slot(&ring, 2);
    assert_eq!((s.counter, s.length, s.status), (7, 1000, STATUS_TRUNCATED));
}

#[test]
fn datagrams_that_lie_about_their_sizes_are_counted_and_write_nothing() {
    let ring = ring();
    let mut dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    for d in hsb::encode_frame(1, &frame(1, 100), 64) {
        dma.on_datagram(&d);
    }
    let before = snapshot(&ring);
    let raw = |h: HsbHeader, payload: usize| {
        let mut d = h.encode().to_vec();
        d.extend(std::iter::repeat_n(0xee, payload));
        d
    };
    let lies = [
        // Offset far past the slot, with a length that claims it fits.
        raw(HsbHeader { counter: 2, offset: u32::MAX - 200, frame_len: u32::MAX, last: false }, 100),
        // A frame larger than a slot.
        raw(HsbHeader { counter: 2, offset: 0, frame_len: CAPACITY as u32 + 1, last: false }, 100),
        // More payload than the frame length.
        raw(HsbHeader { counter: 2, offset: 0, frame_len: 50, last: true }, 100),
        // Offset + payload overflows u32.
        raw(HsbHeader { counter: 2, offset: u32::MAX, frame_len: 100, last: true }, 10),
        // Counter 0, a bad magic, a truncated header.
        raw(HsbHeader { counter: 0, offset: 0, frame_len: 10, last: true }, 10),
        b"XX\x01\x01\0\0\0\x02\0\0\0\0\0\0\0\x04abcd".to_vec(),
        vec![0x48, 0x53, 1],
    ];
    for d in &lies {
        dma.on_datagram(d);
    }
    assert_eq!(snapshot(&ring), before, "a lying datagram wrote ring memory");
    let c = dma.counters();
    assert_eq!((c.malformed, c.too_large), (lies.len() as u64 - 2, 2), "{c:?}");
    assert_complete(&ring, 1, &frame(1, 100));
}

#[test]
fn the_dma_engine_is_the_rings_only_writer() {
    let ring = ring();
    let _dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    assert!(matches!(HsbDma::new(Arc::clone(&ring)), Err(HsbIngestError::WriterTaken)));
    assert!(ring.writer().is_none());
}

fn send_args(to: std::net::SocketAddr, count: u64, frame_bytes: u64) -> SendArgs {
    SendArgs {
        to: to.to_string(),
        rate: 2000.0,
        frame_bytes,
        packet_bytes: 1000,
        count: Some(count),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Off,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    }
}

/// Runs the receiver on a thread until `frames` frames were written or 5 s passed.
fn receive_while(ring: &Arc<FrameRing>, send: impl FnOnce(std::net::SocketAddr)) -> HsbCounters {
    let rx =
        HsbReceiver::bind("127.0.0.1:0".parse().unwrap(), HsbDma::new(Arc::clone(ring)).unwrap()).unwrap();
    let addr = rx.local_addr().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || rx.run(&stop))
    };
    send(addr);
    // Let the last datagrams arrive (the receiver writes as they come).
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    thread.join().unwrap()
}

#[test]
fn the_hsb_sender_feeds_the_receiver_over_loopback() {
    let ring = ring();
    let frames = 6u64;
    let started = Instant::now();
    let counters = receive_while(&ring, |addr| {
        // At the pace of a 0.5 Gb/s link: the four datagrams of a frame ~17 µs apart.
        let args = SendArgs { link_gbps: Some(0.5), ..send_args(addr, frames, 3000) };
        let stats = run_hsb_sender(&args, &AtomicBool::new(false), |_| {}).unwrap();
        assert_eq!(stats.frames, frames);
        assert_eq!(stats.packets_per_frame, 4, "3000 bytes in datagrams of 984");
        assert_eq!(stats.packets, frames * 4);
    });
    assert!(started.elapsed() < Duration::from_secs(10));
    assert_eq!(counters.frames_complete, frames, "{counters:?}");
    assert_eq!((counters.malformed, counters.stale, counters.frames_truncated), (0, 0, 0));
    // Frames 3..6 (counters) are still in the four slots.
    for k in 2..frames {
        assert_complete(&ring, hsb_counter(k), &hsb_frame_payload(Pattern::Random, k, 3000));
    }
    assert_eq!(ring.head(), 0);
}

#[test]
fn the_sender_checks_its_hsb_settings() {
    let to = "127.0.0.1:9".parse().unwrap();
    let never = AtomicBool::new(false);
    let bad = [
        (SendArgs { streams: 2, ..send_args(to, 1, 100) }, "--streams"),
        (SendArgs { packet_bytes: HEADER_LEN, ..send_args(to, 1, 100) }, "--packet-bytes"),
        (SendArgs { frame_bytes: 0, ..send_args(to, 1, 100) }, "--frame-bytes"),
        (SendArgs { rate: 0.0, ..send_args(to, 1, 100) }, "--rate"),
        (SendArgs { link_gbps: Some(-1.0), ..send_args(to, 1, 100) }, "--link-gbps -1"),
        (SendArgs { link_gbps: Some(1e-9), ..send_args(to, 1, 100) }, "raise --link-gbps"),
    ];
    for (args, key) in bad {
        let err: SendError = run_hsb_sender(&args, &never, |_| {}).unwrap_err();
        assert!(err.to_string().contains(key), "{key}: {err}");
    }
    assert_eq!(SendFormat::default(), SendFormat::Native);
}

/// The host backend cannot run a handler: the appliance says so, naming the
/// key, instead of running the built-in handler in its place.
#[test]
fn the_host_appliance_refuses_a_user_handler() {
    let mut cfg = frameloop::config::parse(
        "backend = \"host\"\n[handler]\nsource = \"handlers/hsb_ready.cu\"\nentry = \"hsb_ready\"\n",
    )
    .unwrap();
    cfg.ingest.bind = "127.0.0.1:0".into();
    let opts = frameloop::app::StartOptions { histogram_log: None, on_result: None, ..Default::default() };
    let err = frameloop::app::Appliance::start(&cfg, opts).err().expect("a [handler] is refused on the host");
    let msg = err.to_string();
    assert!(msg.contains("handler.entry") && msg.contains("host backend cannot run it"), "{msg}");
}

/// `handlers/hsb_ready.cu` on the CPU, reading the ring memory the receiver
/// wrote: one call per poll of the slot the next frame is due in.
struct HsbReadyModel {
    last_claimed: u64,
    last_counter: u32,
}

impl HsbReadyModel {
    /// `(counter, length, truncated)` when the due slot holds a new frame.
    fn poll(&mut self, ring: &FrameRing) -> Option<(u32, u32, bool)> {
        let s = slot(ring, (self.last_claimed % SLOTS as u64) as usize);
        let last = self.last_counter;
        if s.counter == 0 || s.counter == last || (last != 0 && (s.counter.wrapping_sub(last) as i32) < 0) {
            return None;
        }
        self.last_counter = s.counter;
        self.last_claimed += 1;
        Some((s.counter, s.length, s.status & STATUS_TRUNCATED != 0))
    }
}

#[test]
fn a_handler_polling_slots_in_turn_finds_every_frame_even_after_loss() {
    let ring = ring();
    let mut dma = HsbDma::new(Arc::clone(&ring)).unwrap();
    let mut handler = HsbReadyModel { last_claimed: 0, last_counter: 0 };
    let mut found = Vec::new();
    for counter in 1..=20u32 {
        // Frames 7 and 8 are lost whole; frame 12 loses its first datagram.
        if counter == 7 || counter == 8 {
            continue;
        }
        for (i, d) in hsb::encode_frame(counter, &frame(counter, 1500), 600).iter().enumerate() {
            if counter == 12 && i == 0 {
                continue;
            }
            dma.on_datagram(d);
        }
        dma.flush();
        while let Some(f) = handler.poll(&ring) {
            found.push(f);
        }
        assert!(handler.poll(&ring).is_none(), "nothing new after frame {counter}");
    }
    let counters: Vec<u32> = found.iter().map(|f| f.0).collect();
    assert_eq!(counters, (1..=20).collect::<Vec<_>>(), "every counter, in order, none twice");
    for &(counter, len, truncated) in &found {
        let lost = counter == 7 || counter == 8;
        assert_eq!(len, if lost { 0 } else { 1500 }, "frame {counter}");
        assert_eq!(truncated, lost || counter == 12, "frame {counter}");
    }
}

/// `ingest.format = "hsb"` parses, and without a `[handler]` (nothing would
/// find the frames) the appliance refuses to start, saying what to add.
#[test]
fn hsb_ingest_without_a_handler_is_refused() {
    let mut cfg =
        frameloop::config::parse("backend = \"host\"\n[ingest]\nformat = \"hsb\"\ntransport = \"udp\"\n")
            .unwrap();
    assert_eq!(cfg.ingest.format, frameloop::ingest::hsb::IngestFormat::Hsb);
    assert!(frameloop::config::parse("[ingest]\nformat = \"hsv\"\n").is_err());
    cfg.ingest.bind = "127.0.0.1:0".into();
    let opts = frameloop::app::StartOptions { histogram_log: None, on_result: None, ..Default::default() };
    let err = frameloop::app::Appliance::start(&cfg, opts).err().expect("hsb ingest needs a handler");
    let msg = err.to_string();
    assert!(msg.contains("ingest.format") && msg.contains("add [handler]"), "{msg}");
    // Over RDMA (or auto, which may pick it) the HSB receiver would not run.
    cfg.ingest.transport = frameloop::rdma::Transport::Auto;
    let opts = frameloop::app::StartOptions { histogram_log: None, on_result: None, ..Default::default() };
    let err = frameloop::app::Appliance::start(&cfg, opts).err().expect("hsb ingest needs udp");
    assert!(err.to_string().contains("ingest.transport = \"udp\""), "{err}");
}
