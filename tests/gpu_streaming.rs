//! Sub-frame streaming on the GPU (`loop.stream_to_gpu`): frames of 786,432
//! bytes, 2 MiB + 6 and 8 MiB sent over loopback UDP into an appliance that
//! streams them into GPU memory while they arrive, some with a pause in the
//! middle (so pulls run mid-frame), some missing a packet (first, middle or
//! last: published incomplete, the missing bytes zero, although the staging
//! buffer holds the previous frame's bytes there). Every result is checked
//! against the CPU reference chain of the bytes the slot holds, on fresh
//! random input. Needs a GPU:
//! `cargo test --release --test gpu_streaming -- --include-ignored`.

mod appliance_support;

use appliance_support::{Running, check_result, reference_chain};
use frameloop::config::{BackendChoice, Config, StreamToGpu};
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::layout::{RESULT_GPU_CLOCK, SLOT_COMPLETE, SLOT_INCOMPLETE};
use frameloop::wire::native;
use std::net::UdpSocket;
use std::time::Duration;

const SIZES: [usize; 3] = [786_432, 2 * 1024 * 1024 + 6, 8 * 1024 * 1024];
/// Payload bytes of a datagram (8972-byte datagrams, 48-byte header).
const MAX_PAYLOAD: u32 = 8972 - 48;

fn chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![0.0625, 0.25, 0.375, 0.25, 0.0625] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 8.0 },
    ]
}

/// `ingest.frame_timeout_ms` of these tests.
const FRAME_TIMEOUT_MS: u64 = 100;
/// The pause after each frame: longer than [`FRAME_TIMEOUT_MS`], so an
/// incomplete frame is published before the next one starts.
const BETWEEN_FRAMES: Duration = Duration::from_millis(FRAME_TIMEOUT_MS + 30);

fn config(slot_bytes: usize, stream: StreamToGpu) -> Config {
    let mut cfg = Config { backend: BackendChoice::Cuda, chain: chain(), ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.recv_buffer_bytes = 64 << 20;
    // A whole frame's datagrams come within this even where the host stalls
    // the sending thread for milliseconds; an incomplete one is published
    // this long after its first datagram.
    cfg.ingest.reassembly.frame_timeout_ms = FRAME_TIMEOUT_MS;
    cfg.ring.slots = 8;
    cfg.ring.slot_bytes = slot_bytes;
    cfg.loop_.stream_to_gpu = stream;
    cfg
}

/// xorshift64*, seeded from the clock (printed, to replay a failure).
struct Rng(u64);

impl Rng {
    fn fresh() -> Self {
        let seed =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
        eprintln!("random seed {seed:#x}");
        Rng(seed)
    }
    fn fill(&mut self, n: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(n + 8);
        while out.len() < n {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            out.extend_from_slice(&self.0.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
        }
        out.truncate(n);
        out
    }
}

/// One frame to send: its bytes, the packets left out, and the packet
/// after which the sender pauses (so the GPU pulls a part mid-frame).
struct Frame {
    seq: u64,
    payload: Vec<u8>,
    skip: Vec<u32>,
    pause_after: Option<u32>,
}

impl Frame {
    /// The payload the slot holds once published: missing packets zero.
    fn expected(&self) -> Vec<u8> {
        let mut p = self.payload.clone();
        for &i in &self.skip {
            let (_, off, len) = native::packet_span(p.len() as u32, MAX_PAYLOAD, i);
            p[off as usize..(off + len) as usize].fill(0);
        }
        p
    }
}

fn send(sock: &UdpSocket, to: std::net::SocketAddr, f: &Frame) {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64;
    for (i, d) in native::encode_frame(1, f.seq, &f.payload, MAX_PAYLOAD, now).iter().enumerate() {
        let i = i as u32;
        if !f.skip.contains(&i) {
            sock.send_to(d, to).expect("send over loopback");
        }
        if i % 128 == 127 {
            std::thread::sleep(Duration::from_micros(100));
        }
        if f.pause_after == Some(i) {
            std::thread::sleep(Duration::from_millis(3));
        }
    }
}

#[test]
#[ignore = "needs a GPU"]
fn streamed_frames_match_the_cpu_chain_complete_and_incomplete() {
    let chain = chain();
    let mut rng = Rng::fresh();
    for size in SIZES {
        let running = Running::start_any(&config(size, StreamToGpu::On));
        assert_eq!(running.app.backend().name(), "cuda");
        let packets = native::packet_span(size as u32, MAX_PAYLOAD, 0).0;
        let plan: [(Vec<u32>, Option<u32>); 8] = [
            (vec![], Some(packets / 2)),
            (vec![], None),
            (vec![packets / 2], Some(packets / 3)),
            (vec![], Some(packets / 4)),
            (vec![0], Some(packets / 2)),
            (vec![], None),
            (vec![packets - 1], Some(packets / 2)),
            (vec![1, packets - 2], None),
        ];
        let frames: Vec<Frame> = plan
            .into_iter()
            .enumerate()
            .map(|(k, (skip, pause_after))| Frame {
                seq: k as u64,
                payload: rng.fill(size),
                skip,
                pause_after,
            })
            .collect();
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        for f in &frames {
            send(&sock, running.addr(), f);
            std::thread::sleep(BETWEEN_FRAMES);
        }
        let results = running.wait_results(frames.len());
        let (report, _) = running.stop();
        assert_eq!(results.len(), frames.len(), "one result per frame: {:?}", report.ingest);
        for (r, f) in results.iter().zip(&frames) {
            assert_eq!(r.frame_seq, f.seq, "results in frame order");
            assert_ne!(r.result_flags & RESULT_GPU_CLOCK, 0, "results come from the GPU");
            let want_flags = if f.skip.is_empty() { SLOT_COMPLETE } else { SLOT_INCOMPLETE };
            assert_eq!(
                r.slot_flags & (SLOT_COMPLETE | SLOT_INCOMPLETE),
                want_flags,
                "{size} B frame {}: {:?}",
                f.seq,
                report.ingest
            );
            check_result(r, &reference_chain(&chain, &f.expected()));
        }
        assert_eq!(report.ingest.frames_incomplete, 4, "{size} B: {:?}", report.ingest);
        eprintln!("{size} B: {} frames through the streaming path match the CPU chain", frames.len());
    }
}

/// Streaming off, on and "auto" (which streams a 2 MiB slot) give the CPU's
/// results for the same bytes, and the same extremes and detections.
#[test]
#[ignore = "needs a GPU"]
fn streaming_on_off_and_auto_agree() {
    let chain = chain();
    let mut rng = Rng::fresh();
    let size = SIZES[1];
    let frames: Vec<Frame> = (0..4)
        .map(|k| Frame {
            seq: k,
            payload: rng.fill(size),
            skip: if k == 2 { vec![5] } else { vec![] },
            pause_after: Some(7),
        })
        .collect();
    let mut all = Vec::new();
    for mode in [StreamToGpu::Off, StreamToGpu::On, StreamToGpu::Auto] {
        let running = Running::start_any(&config(size, mode));
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        for f in &frames {
            send(&sock, running.addr(), f);
            std::thread::sleep(BETWEEN_FRAMES);
        }
        let results = running.wait_results(frames.len());
        running.stop();
        for (r, f) in results.iter().zip(&frames) {
            check_result(r, &reference_chain(&chain, &f.expected()));
        }
        all.push(results);
    }
    for pair in all.windows(2) {
        for (a, b) in pair[0].iter().zip(&pair[1]) {
            assert_eq!(
                (a.min.to_bits(), a.max.to_bits(), a.detect_count, a.first_detect_index, a.slot_flags),
                (b.min.to_bits(), b.max.to_bits(), b.detect_count, b.first_detect_index, b.slot_flags),
                "frame {}: the same bits with and without streaming",
                a.frame_seq
            );
        }
    }
}
