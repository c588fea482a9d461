//! Zero-length and one-byte datagrams interleaved with a frame stream under
//! load (a running appliance, host backend, loopback UDP): the stream comes
//! in GRO buffers (the sender uses UDP_SEGMENT) and is received straight
//! into ring slots, the runts come in bursts that fill whole receive
//! batches, and every runt is counted exactly once, as `short_header`, in
//! the stop report and in what `/metrics` shows alike.

mod appliance_support;

use appliance_support::{Running, host_config, one_at_a_time};
use frameloop::ingest::ReceiveIntoSlots;
use frameloop::ops::default_chain;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use frameloop::wire::native;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

const FRAME_BYTES: usize = 32 * 1024;
const PAYLOAD: usize = 8192;
const FRAMES: u64 = 400;

/// Sends `bursts` bursts of `per_burst` runts (alternately empty and one
/// byte) back to back, a short pause between bursts; returns how many.
fn send_runts(to: SocketAddr, bursts: u64, per_burst: u64) -> u64 {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut sent = 0;
    for _ in 0..bursts {
        for k in 0..per_burst {
            let len = (k % 2) as usize;
            sock.send_to(&[0x7f][..len], to).unwrap();
            sent += 1;
        }
        std::thread::sleep(Duration::from_micros(500));
    }
    sent
}

#[test]
fn empty_and_one_byte_datagrams_among_a_stream_are_each_counted_once() {
    let _serial = one_at_a_time();
    let mut cfg = host_config(default_chain());
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.ring.slots = 512;
    cfg.ingest.receive_into_slots = ReceiveIntoSlots::On;
    cfg.ingest.gro = true;
    cfg.ingest.batch = 64;
    let app = Running::start(&cfg);
    let to = app.addr();

    let runts = std::thread::spawn(move || send_runts(to, 200, 128));
    let args = SendArgs {
        to: to.to_string(),
        rate: 1000.0,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: PAYLOAD + native::HEADER_LEN,
        count: Some(FRAMES),
        duration: None,
        streams: 1,
        pattern: Pattern::Counter,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let stats = run_sender(&args, &AtomicBool::new(false), |_| {}).expect("the sender runs");
    let runts = runts.join().unwrap();
    assert_eq!(stats.frames, FRAMES);
    let datagrams = stats.packets + runts;
    // Everything sent reaches the counters: either read (and counted) or
    // dropped by the kernel, which this loopback run must not do.
    let seen = app.wait_ingest("every datagram sent", |s| s.datagrams >= datagrams);
    let metrics = app.app.metrics_snapshot();
    let (report, results) = app.stop();

    let s = &report.ingest;
    assert_eq!(seen.datagrams, datagrams, "{seen:?}");
    assert_eq!(s.datagrams, datagrams, "{s:?}");
    assert_eq!(s.short_header, runts, "every runt counted once: {s:?}");
    assert_eq!(s.datagrams_dropped(), runts, "only the runts are dropped: {s:?}");
    assert_eq!(s.packets_accepted, stats.packets, "{s:?}");
    assert_eq!(s.datagrams_accounted(), s.datagrams, "{s:?}");
    let short_header = metrics.drops.iter().find(|(name, _)| name == "short_header").map(|(_, n)| *n);
    assert_eq!(short_header, Some(runts), "/metrics shows what the report shows");
    assert_eq!(s.frames_complete, FRAMES, "{s:?}");
    assert_eq!(results.len() as u64, FRAMES);
    if stats.gso == frameloop::sender::GsoStatus::Active {
        assert!(s.gro_segments > 0, "the stream came in GRO buffers: {s:?}");
    }
}
