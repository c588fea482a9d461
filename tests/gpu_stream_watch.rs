//! While the claiming tiled kernel's block 0 polls for a frame, its puller
//! block copies what the next frame's received mark says is final into
//! device memory (`fl_tiled_puller`, kernels/fused_tiled.cu), checked on a
//! real GPU (ignored without one): `cargo test --release --test
//! gpu_stream_watch -- --include-ignored`.
//!
//! The kernels are built with `FL_TILED_PHASES`, so each result of the
//! claiming tiled kernel carries the bytes its tiles read from the slot over
//! the bus after the claim (user result word 6, `FL_MARK_SLOT_BYTES`). Each
//! frame is written whole, marked received, and published after a hold
//! long enough for the puller's rounds of 64 KiB to move it. A puller that
//! follows the mark while the poll runs leaves the tiles nothing to read
//! from the slot; one that only ran between polls, or not at all, would
//! leave them the whole frame in most frames. Frames published at once
//! after their mark are checked too: the tiles then read the rest from the
//! slot (or wait for the puller's round in flight), and every result
//! matches the CPU either way.

mod gpu_support;

use frameloop::config::LoopConfig;
use frameloop::gpu::executor::{ExecutorOptions, ResidentExecutor, chain_flags};
use frameloop::gpu::fused::FusedChain;
use frameloop::gpu::fused::tiled::{FrameSource, tiled_fragment};
use frameloop::gpu::test_rings::{MappedRings, fill_frame};
use frameloop::ops::{CpuChain, default_chain};
use frameloop::ring::layout::SlotHeader;
use frameloop::ring::{OverrunPolicy, ResultReader};
use gpu_support::{runtime, wait_results};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long a test waits for its results.
const RESULTS_WITHIN: Duration = Duration::from_secs(5);

const FRAME_BYTES: usize = 786_432;
const FRAMES: u64 = 40;
/// Between a frame's mark and its publication, for the frames that wait:
/// twelve rounds of 64 KiB take tens of microseconds.
const HOLD: Duration = Duration::from_micros(500);
/// The user result word of `FL_MARK_SLOT_BYTES` (kernels/fused_tiled.cu).
const SLOT_BYTES_WORD: usize = 6;

#[test]
#[ignore = "needs a GPU"]
fn the_puller_moves_a_marked_frame_while_the_poll_runs() {
    // SAFETY: the only test of this binary, run before anything else reads
    // the environment (the runtime, which compiles the kernels, starts below).
    unsafe { std::env::set_var("FRAMELOOP_NVRTC_DEFINES", "FL_TILED_PHASES") };
    let rt = runtime();
    let seed = 0x3a7c ^ frameloop::clock::realtime_ns();
    eprintln!("random seed {seed:#x}");
    let chain = default_chain();
    let rings = MappedRings::new(&rt, 8, FRAME_BYTES, 64, OverrunPolicy::Every).unwrap();
    let mut reader = ResultReader::new(Arc::clone(&rings.results));
    let mut opts = ExecutorOptions::new(LoopConfig::default());
    opts.stream = true;
    opts.workload_claims_frames = true;
    let encoded = FusedChain::encode(&chain, FRAME_BYTES).unwrap();
    let mut ex = ResidentExecutor::new(
        Arc::clone(&rt),
        tiled_fragment(encoded, FrameSource::DeviceMemory).unwrap(),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        chain_flags(&chain),
        opts,
    )
    .unwrap();
    assert!(ex.workload_claims_frames());
    let mut w = rings.frames.writer().unwrap();
    ex.launch().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let mut out = Vec::new();
    for i in 0..FRAMES {
        let seq = w.reserve().unwrap();
        fill_frame(seed, i, &mut w.payload_mut(seq)[..FRAME_BYTES]);
        w.mark_received(seq, FRAME_BYTES as u32);
        // Odd frames are published at once: the claim races the puller.
        let hold = if i % 2 == 0 { HOLD } else { Duration::ZERO };
        let marked = Instant::now();
        while marked.elapsed() < hold {
            std::hint::spin_loop();
        }
        let header = SlotHeader {
            frame_seq: i,
            payload_len: FRAME_BYTES as u32,
            received_mark: frameloop::ring::layout::received_mark(seq, FRAME_BYTES as u32),
            ..Default::default()
        };
        w.publish(seq, &header);
        wait_results(&mut reader, &mut out, i as usize + 1, RESULTS_WITHIN);
        // The loop idles again before the next frame.
        std::thread::sleep(Duration::from_millis(1));
    }
    let stats = ex.tear_down().unwrap();
    assert_eq!(stats.frames_processed, FRAMES);
    let mut cpu = CpuChain::new(&chain, FRAME_BYTES).unwrap();
    let mut payload = vec![0u8; FRAME_BYTES];
    for r in &out {
        fill_frame(seed, r.frame_seq, &mut payload);
        let want = cpu.run(&payload);
        let s = want.stats.expect("the default chain has stats");
        assert_eq!((r.min, r.max), (s.min, s.max), "frame {}: min/max", r.frame_seq);
        assert_eq!(Some((r.detect_count, r.first_detect_index)), want.detect, "frame {}", r.frame_seq);
    }
    let read: Vec<u32> = out.iter().map(|r| r.user[SLOT_BYTES_WORD]).collect();
    assert!(read.iter().all(|&b| b as usize <= FRAME_BYTES), "at most the frame: {read:?}");
    let held: Vec<u32> =
        out.iter().filter(|r| r.frame_seq % 2 == 0).map(|r| r.user[SLOT_BYTES_WORD]).collect();
    let pulled_first = held.iter().filter(|&&b| b == 0).count();
    eprintln!(
        "{pulled_first} of {} held frames pulled whole before their claim; slot bytes read: {read:?}",
        held.len()
    );
    assert!(
        pulled_first * 4 >= held.len() * 3,
        "the puller should move a frame held {HOLD:?} after its mark in most frames: {held:?}"
    );
}
