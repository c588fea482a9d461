//! A standard RFC 4175 sender: GStreamer's `rtpvrawpay` streams solid-colour
//! test-pattern frames over loopback UDP; frameloop's assembler must publish
//! every frame complete, with the right size and the exact UYVY bytes.
//!
//! Skipped with a message when gst-launch-1.0 is missing, unless
//! `FRAMELOOP_REQUIRE_TOOLS` is set (CI), which makes it a failure.

use frameloop::clock;
use frameloop::ring::layout::{SLOT_COMPLETE, ring_bytes};
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy};
use frameloop::rtp::{RtpAssembler, RtpConfig, RtpCounter, Sampling};
use std::net::UdpSocket;
use std::process::Command;
use std::time::Duration;

const W: u32 = 320;
const H: u32 = 240;

fn gst_available() -> bool {
    let ok = Command::new("gst-launch-1.0").arg("--version").output().is_ok_and(|o| o.status.success());
    if !ok {
        if std::env::var_os("FRAMELOOP_REQUIRE_TOOLS").is_some() {
            panic!(
                "gst-launch-1.0 is not installed but FRAMELOOP_REQUIRE_TOOLS is set; run scripts/setup.sh"
            );
        }
        eprintln!("skipping: gst-launch-1.0 is not installed (run scripts/setup.sh)");
    }
    ok
}

/// Streams `frames` frames of `pattern` and returns what the assembler published:
/// (flags, payload) per frame, and the assembler's drop count.
fn stream(pattern: &str, frames: u32) -> (Vec<(u32, Vec<u8>)>, u64) {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let _ = socket2::SockRef::from(&socket).set_recv_buffer_size(8 << 20);
    socket.set_read_timeout(Some(Duration::from_millis(500))).unwrap();
    let port = socket.local_addr().unwrap().port();
    let settings = RtpConfig::inline(Sampling::Ycbcr422, 8, W, H).resolve().unwrap();
    let cap = settings.geometry.frame_bytes();
    let slots = frames as usize + 2;
    let ring = FrameRing::new(
        Box::new(HostMemory::new(ring_bytes(slots, cap).unwrap()).unwrap()),
        slots,
        cap,
        OverrunPolicy::Every,
    )
    .unwrap();
    let mut assembler = RtpAssembler::new(settings, ring.writer().unwrap()).unwrap();
    let mut reader = ring.reader().unwrap();
    let mut sender = Command::new("gst-launch-1.0")
        .arg("-q")
        .args(["videotestsrc", &format!("num-buffers={frames}"), &format!("pattern={pattern}"), "!"])
        .args([&format!("video/x-raw,format=UYVY,width={W},height={H},framerate=30/1"), "!"])
        .args(["rtpvrawpay", "mtu=1400", "!", "udpsink", "host=127.0.0.1", &format!("port={port}")])
        .spawn()
        .unwrap();
    let mut buf = vec![0u8; 65536];
    let mut exited = false;
    loop {
        match socket.recv_from(&mut buf) {
            Ok((n, _)) => assembler.on_datagram(&buf[..n], clock::realtime_ns()),
            // Quiet for 500 ms after the sender exited: everything arrived.
            Err(_) if exited => break,
            Err(_) => {}
        }
        if !exited && sender.try_wait().unwrap().is_some() {
            exited = true;
        }
    }
    assert!(sender.wait().unwrap().success(), "gst-launch-1.0 failed");
    assembler.flush(clock::realtime_ns());
    let mut out = Vec::new();
    while let Some(c) = reader.claim() {
        out.push((c.header.flags, c.payload.to_vec()));
        let seq = c.seq;
        reader.finish(seq);
    }
    (out, assembler.counters().packets_dropped() + assembler.counters().get(RtpCounter::seq_gap_packets))
}

#[test]
fn gstreamer_white_and_black_frames_arrive_exact() {
    if !gst_available() {
        return;
    }
    // 8-bit UYVY of BT.601 white and black: Cb Y Cr Y with limited-range levels.
    for (pattern, pixel_pair) in [("white", [0x80u8, 0xeb, 0x80, 0xeb]), ("black", [0x80, 0x10, 0x80, 0x10])]
    {
        let (frames, dropped) = stream(pattern, 5);
        assert_eq!(dropped, 0, "{pattern}: packets dropped or lost on loopback");
        assert_eq!(frames.len(), 5, "{pattern}: frames published");
        for (i, (flags, payload)) in frames.iter().enumerate() {
            assert_eq!(*flags, SLOT_COMPLETE, "{pattern} frame {i}");
            assert_eq!(payload.len(), (W * H * 2) as usize);
            let wrong = payload.chunks_exact(4).position(|c| c != pixel_pair);
            assert_eq!(wrong, None, "{pattern} frame {i}: first wrong pixel pair");
        }
    }
}
