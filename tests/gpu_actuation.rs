//! Actuation outputs on the CUDA backend, whole appliance over loopback: the
//! GPU forms every message (header and payload) into the transmit ring in
//! mapped host memory and the host only sends it. Every path that publishes
//! a result is checked against the CPU chain: the fused chain, one kernel
//! per operator (the last reduction publishes), a user kernel that asks for
//! actuation through `fl_request_actuation`, and the tiled kernel for 2 MiB
//! frames; sample counts that are not multiples of 4 or of the block size,
//! an output asking for more samples than a frame has (sent short, flagged),
//! and a `"samples"` output the tiled kernel cannot serve (refused at start);
//! two loops on one GPU, each answering its own stream from its own graph.
//! Needs a GPU: `cargo test --test gpu_actuation -- --include-ignored`.

mod actuation_support;
mod appliance_support;
mod loops_support;

use actuation_support::{chain_samples, collect_in_background, listener, output, send_args, sensor};
use appliance_support::{PATIENCE, Running, one_at_a_time};
use frameloop::actuate::{When, config::Part};
use frameloop::config::{BackendChoice, Config, FusedChainMode};
use frameloop::ops::user_kernel::UserKernelSpec;
use frameloop::ops::{OpSpec, SampleFormat, default_chain};
use frameloop::ring::ResultRecord;
use frameloop::sender::{Pattern, run_sender, run_sender_on};
use frameloop::wire::actuation::{FLAG_DETECTED, FLAG_SAMPLES_SHORT, FLAG_USER_REQUEST, decode};
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// u16 samples: 2050 a frame, not a multiple of the 256-thread block.
const FRAME_BYTES: usize = 4100;
const FRAMES: u64 = 300;
/// Not a multiple of 4: the former's 16-byte copies end with a tail.
const SAMPLES: u32 = 37;
/// More than a frame has: sent short, flagged.
const TOO_MANY: u32 = 3000;

fn cuda_config(chain: Vec<OpSpec>, frame_bytes: usize) -> Config {
    let mut cfg = Config { backend: BackendChoice::Cuda, chain, ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ingest.transport = frameloop::ingest::Transport::Udp;
    cfg.ingest.allow = vec!["127.0.0.1".into()];
    cfg.ring.slots = 64;
    cfg.ring.slot_bytes = frame_bytes;
    cfg
}

fn close(got: f32, want: f32) -> bool {
    (got - want).abs() <= 1e-5 * want.abs().max(1.0)
}

fn by_frame(results: Vec<ResultRecord>) -> BTreeMap<u64, ResultRecord> {
    results.into_iter().map(|r| (r.frame_seq, r)).collect()
}

/// The default chain with its threshold at the median of the frames'
/// peaks (some frames detect, some do not).
fn median_threshold_chain(frame_bytes: usize, frames: u64) -> (Vec<OpSpec>, Vec<u64>) {
    let mut chain = default_chain();
    let peaks = |chain: &[OpSpec], seq| {
        chain_samples(chain, seq, frame_bytes, Pattern::Random).into_iter().fold(f32::MIN, f32::max)
    };
    let mut all: Vec<f32> = (0..frames).map(|seq| peaks(&chain, seq)).collect();
    all.sort_by(f32::total_cmp);
    let level = all[all.len() / 2];
    *chain.last_mut().unwrap() = OpSpec::Threshold { level };
    let detects = (0..frames).filter(|&seq| peaks(&chain, seq) > level).collect::<Vec<_>>();
    assert!(!detects.is_empty() && (detects.len() as u64) < frames, "a mixed set: {detects:?}");
    (chain, detects)
}

/// Runs the chain on `mode` with a reply output (record, user words and
/// `SAMPLES` samples), a fixed output of `TOO_MANY` samples and a
/// detection output, and checks every message against the CPU chain.
fn every_path_output_matches_the_cpu(mode: FusedChainMode) {
    let (chain, detects) = median_threshold_chain(FRAME_BYTES, FRAMES);
    let mut cfg = cuda_config(chain.clone(), FRAME_BYTES);
    cfg.loop_.fused_chain = mode;
    let (fixed, fixed_addr) = listener();
    let fixed_addr = fixed_addr.to_string();
    let mut long = output(&[&fixed_addr], vec![Part::Samples], TOO_MANY, When::Every);
    long.max_bytes = 64 + 4 * TOO_MANY;
    cfg.actuate = vec![
        output(&["reply"], vec![Part::Record, Part::User, Part::Samples], SAMPLES, When::Every),
        long,
        output(&[&fixed_addr], vec![Part::Record], 0, When::Detection),
    ];
    assert!(cfg.problems().is_empty(), "{:?}", cfg.problems());
    let running = Running::start_any(&cfg);
    assert_eq!(running.app.backend().name(), "cuda");
    let (socket, replies) = sensor(running.addr());
    let replies = collect_in_background(replies, |g| g.len() as u64 >= FRAMES);
    let want_fixed = FRAMES as usize + detects.len();
    let at_fixed = collect_in_background(fixed, move |g| g.len() >= want_fixed);
    let args = send_args(running.addr(), FRAMES, FRAME_BYTES, Pattern::Random, 1000.0);
    let sent = run_sender_on(socket, &args, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(sent.frames, FRAMES);
    let (got, at_fixed) = (replies.join().unwrap(), at_fixed.join().unwrap());
    let (report, results) = running.stop();
    let results = by_frame(results);
    assert_eq!(results.len() as u64, FRAMES, "{mode:?}: every frame processed");
    assert_eq!(got.len() as u64, FRAMES, "{mode:?}: one reply per frame");

    for (i, bytes) in got.iter().enumerate() {
        let m = decode(bytes).expect("a well-formed message");
        let h = m.header;
        let seq = h.frame_seq;
        let r = results.get(&seq).expect("the reply answers a processed frame");
        assert_eq!((h.stream_id, h.ring_seq, h.output), (0, r.ring_seq, 0), "{mode:?} frame {seq}");
        assert_eq!(h.sender_ts_ns, r.sender_ts_ns, "{mode:?} frame {seq}: the sender's timestamp echoed");
        assert_eq!(h.message_seq, i as u64 + 1, "{mode:?}: the output's messages in order, none lost");
        assert_eq!(m.record.as_ref(), Some(r), "{mode:?} frame {seq}: the record the result thread saw");
        assert_eq!(m.user, Some([0u32; 12]), "{mode:?} frame {seq}: no user kernel, zero words");
        assert_eq!(h.flags & FLAG_DETECTED != 0, detects.contains(&seq), "{mode:?} frame {seq}");
        assert_eq!(h.flags & (FLAG_USER_REQUEST | FLAG_SAMPLES_SHORT), 0, "{mode:?} frame {seq}");
        let want = chain_samples(&chain, seq, FRAME_BYTES, Pattern::Random);
        let samples: Vec<f32> = m.samples().collect();
        assert_eq!(samples.len(), SAMPLES as usize);
        for (k, (&g, &w)) in samples.iter().zip(&want).enumerate() {
            assert!(close(g, w), "{mode:?} frame {seq} sample {k}: {g} != {w}");
        }
    }

    let mut long_frames = Vec::new();
    let mut detect_frames = Vec::new();
    for bytes in &at_fixed {
        let m = decode(bytes).expect("a well-formed message");
        let (h, seq) = (m.header, m.header.frame_seq);
        match h.output {
            1 => {
                let want = chain_samples(&chain, seq, FRAME_BYTES, Pattern::Random);
                assert_eq!(h.flags & FLAG_SAMPLES_SHORT, FLAG_SAMPLES_SHORT, "{mode:?} frame {seq}: short");
                let samples: Vec<f32> = m.samples().collect();
                assert_eq!(samples.len(), want.len(), "{mode:?} frame {seq}: every sample the frame has");
                for (k, (&g, &w)) in samples.iter().zip(&want).enumerate() {
                    assert!(close(g, w), "{mode:?} frame {seq} sample {k}: {g} != {w}");
                }
                long_frames.push(seq);
            }
            2 => {
                assert_eq!(m.record.as_ref(), results.get(&seq), "{mode:?} frame {seq}");
                detect_frames.push(seq);
            }
            o => panic!("{mode:?}: a message of output {o} at the fixed destination"),
        }
    }
    long_frames.sort_unstable();
    detect_frames.sort_unstable();
    assert_eq!(long_frames, (0..FRAMES).collect::<Vec<_>>(), "{mode:?}: the long output, every frame");
    assert_eq!(detect_frames, detects, "{mode:?}: the detection output, exactly the detecting frames");

    let a = report.actuation.expect("the report has the actuation outputs");
    let sent: Vec<u64> = a.outputs.iter().map(|o| o.sent).collect();
    assert_eq!(sent, [FRAMES, FRAMES, detects.len() as u64], "{mode:?}: {a:?}");
    for o in &a.outputs {
        assert_eq!((o.send_errors, o.dropped, o.rate_limited, o.no_reply_address), (0, 0, 0, 0), "{a:?}");
        assert!(o.sent == 0 || o.ready_to_sent.max_us < PATIENCE.as_secs_f64() * 1e6, "{a:?}");
    }
}

#[test]
#[ignore = "needs a GPU"]
fn the_fused_chain_forms_every_message_on_the_gpu() {
    let _one = one_at_a_time();
    every_path_output_matches_the_cpu(FusedChainMode::On);
}

#[test]
#[ignore = "needs a GPU"]
fn one_kernel_per_operator_forms_every_message_on_the_gpu() {
    let _one = one_at_a_time();
    every_path_output_matches_the_cpu(FusedChainMode::Off);
}

/// Doubles each sample; user word 0 = the frame sequence; asks for
/// actuation on frames whose sequence is 1 mod 3.
const FLAGGING_KERNEL: &str = r#"
#include "frameloop.cuh"
extern "C" __global__ void flag_some(const fl_frame* frame, const float* in, float* out, const void* params,
                                     fl_user_result* user) {
  const uint32_t i = fl_thread_index();
  if (i == 0) {
    user->words[0] = (uint32_t)frame->sequence;
    user->words[11] = 0xfeed0000u | (uint32_t)frame->sequence;
    if (frame->sequence % 3 == 1) fl_request_actuation(user);
  }
  if (i < frame->out_count) out[i] = i < frame->in_count ? 2.0f * in[i] : 0.0f;
}
"#;

#[test]
#[ignore = "needs a GPU"]
fn a_user_kernel_asks_for_actuation_on_the_frames_it_flags() {
    let _one = one_at_a_time();
    let kernel = UserKernelSpec {
        source: Default::default(),
        code: Some(FLAGGING_KERNEL.into()),
        entry: "flag_some".into(),
        params: Default::default(),
        param_types: vec![],
        output: Default::default(),
        threads: None,
        blocks: None,
        shared_bytes: 0,
    };
    let unpack = OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 };
    let mut cfg = cuda_config(vec![unpack.clone(), OpSpec::Kernel(kernel)], FRAME_BYTES);
    let (fixed, fixed_addr) = listener();
    let fixed_addr = fixed_addr.to_string();
    cfg.actuate = vec![
        output(&[&fixed_addr], vec![Part::User], 0, When::Flag),
        output(&[&fixed_addr], vec![Part::Samples], SAMPLES, When::Every),
    ];
    assert!(cfg.problems().is_empty(), "{:?}", cfg.problems());
    let running = Running::start_any(&cfg);
    let flagged: Vec<u64> = (0..FRAMES).filter(|s| s % 3 == 1).collect();
    let want = FRAMES as usize + flagged.len();
    let got = collect_in_background(fixed, move |g| g.len() >= want);
    let args = send_args(running.addr(), FRAMES, FRAME_BYTES, Pattern::Random, 1000.0);
    let sent = run_sender(&args, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(sent.frames, FRAMES);
    let got = got.join().unwrap();
    let (report, results) = running.stop();
    let results = by_frame(results);
    assert_eq!(results.len() as u64, FRAMES);
    let (mut flag_frames, mut every_frames) = (Vec::new(), Vec::new());
    for bytes in &got {
        let m = decode(bytes).expect("a well-formed message");
        let (h, seq) = (m.header, m.header.frame_seq);
        let r = results.get(&seq).expect("a processed frame");
        assert_eq!(h.flags & FLAG_USER_REQUEST != 0, seq % 3 == 1, "frame {seq}: the request flag");
        assert_eq!(r.actuate_request != 0, seq % 3 == 1, "frame {seq}: the record carries the request");
        match h.output {
            0 => {
                let user = m.user.expect("user words");
                assert_eq!((user[0], user[11]), (seq as u32, 0xfeed_0000 | seq as u32), "frame {seq}");
                assert_eq!(&user, &r.user, "frame {seq}: the words the record carries");
                flag_frames.push(seq);
            }
            1 => {
                let frame = Pattern::Random.frame(0, seq, FRAME_BYTES);
                let samples: Vec<f32> = m.samples().collect();
                assert_eq!(samples.len(), SAMPLES as usize);
                for (k, (&g, pair)) in samples.iter().zip(frame.chunks_exact(2)).enumerate() {
                    let want = 2.0 * f32::from(u16::from_le_bytes([pair[0], pair[1]]));
                    assert!(close(g, want), "frame {seq} sample {k}: {g} != {want}");
                }
                every_frames.push(seq);
            }
            o => panic!("a message of output {o}"),
        }
    }
    flag_frames.sort_unstable();
    every_frames.sort_unstable();
    assert_eq!(flag_frames, flagged, "the flag output sends exactly the flagged frames");
    assert_eq!(every_frames, (0..FRAMES).collect::<Vec<_>>());
    let a = report.actuation.unwrap();
    assert_eq!(a.outputs.iter().map(|o| o.sent).collect::<Vec<_>>(), [flagged.len() as u64, FRAMES]);
}

/// 2 MiB frames of u16: the tiled kernel, which keeps no final samples.
const LARGE_BYTES: usize = 2 << 20;
const LARGE_FRAMES: u64 = 40;

#[test]
#[ignore = "needs a GPU"]
fn large_frames_on_the_tiled_kernel_reply_with_their_records() {
    let _one = one_at_a_time();
    // The default chain: a million random samples per frame all but fix
    // each frame's peak, so the detection flag is checked against the record.
    let mut cfg = cuda_config(default_chain(), LARGE_BYTES);
    cfg.ring.slots = 16;
    cfg.actuate = vec![output(&["reply"], vec![Part::Record], 0, When::Every)];
    let running = Running::start_any(&cfg);
    let (socket, replies) = sensor(running.addr());
    socket.set_send_buffer_size(8 << 20).unwrap();
    let got = collect_in_background(replies, |g| g.len() as u64 >= LARGE_FRAMES);
    let args = send_args(running.addr(), LARGE_FRAMES, LARGE_BYTES, Pattern::Random, 50.0);
    let sent = run_sender_on(socket, &args, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(sent.frames, LARGE_FRAMES);
    let got = got.join().unwrap();
    let (report, results) = running.stop();
    let results = by_frame(results);
    assert_eq!(results.len() as u64, LARGE_FRAMES, "every frame processed: {:?}", report.loop_stats);
    assert_eq!(got.len() as u64, LARGE_FRAMES, "one reply per frame");
    for bytes in &got {
        let m = decode(bytes).expect("a well-formed message");
        let seq = m.header.frame_seq;
        let r = results.get(&seq).expect("a processed frame");
        assert_eq!(m.record.as_ref(), Some(r), "frame {seq}");
        assert_eq!(m.header.flags & FLAG_DETECTED != 0, r.detect_count > 0, "frame {seq}");
    }

    // The tiled kernel keeps no final samples: an output of samples is refused.
    let mut cfg = cuda_config(default_chain(), LARGE_BYTES);
    cfg.ring.slots = 16;
    cfg.actuate = vec![output(&["reply"], vec![Part::Samples], 8, When::Every)];
    let err = match frameloop::app::Appliance::start(&cfg, Default::default()) {
        Ok(_) => panic!("an output of samples on the tiled kernel was accepted"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("samples") && err.contains("tiled"), "{err}");
}

#[test]
#[ignore = "needs a GPU"]
fn two_loops_on_one_gpu_each_answer_their_own_stream() {
    let _one = one_at_a_time();
    let (fixed, fixed_addr) = listener();
    let table = format!(
        "[[loop.actuate]]\ndestination = \"{fixed_addr}\"\nsend = [\"record\", \"samples\"]\nsamples = 5\n"
    );
    let text = loops_support::TWO_LOOPS
        .replace("backend = \"host\"", "backend = \"cuda\"")
        .replace("frame_timeout_ms = 1000", "frame_timeout_ms = 1000\ntransport = \"udp\"")
        .replace("name = \"cam0\"", "name = \"cam0\"\ngpu = 0")
        .replace("name = \"cam1\"", "name = \"cam1\"\ngpu = 0")
        .replace(
            "data_not_ready_sleep_interval_us = 100\n",
            &format!("data_not_ready_sleep_interval_us = 100\n{table}"),
        );
    let cfg = frameloop::config::parse(&text).unwrap();
    assert_eq!(cfg.loops.iter().map(|l| l.actuate.len()).collect::<Vec<_>>(), [1, 1], "{text}");
    let (set, seen) = loops_support::start(&cfg, None);
    let (a, b) = (loops_support::addr(&set, "cam0"), loops_support::addr(&set, "cam1"));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let frames = loops_support::FRAMES;
    let got = collect_in_background(fixed, move |g| g.len() as u64 >= 2 * frames);
    for seq in 0..frames {
        loops_support::send_frame(&socket, a, 1, seq);
        loops_support::send_frame(&socket, b, 2, seq);
        std::thread::sleep(Duration::from_millis(1));
    }
    let got = got.join().unwrap();
    let report = set.stop();
    assert!(report.down().is_empty(), "{:?}", report.down());
    let seen = seen.lock().unwrap();
    let mut per_stream: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for bytes in &got {
        let m = decode(bytes).expect("a well-formed message");
        let (stream, seq) = (m.header.stream_id, m.header.frame_seq);
        let name = if stream == 1 { "cam0" } else { "cam1" };
        let r = seen[name].iter().find(|r| r.frame_seq == seq).expect("a frame the loop processed");
        assert_eq!(m.record.as_ref(), Some(r), "{name} frame {seq}: its own loop's record");
        assert_eq!(m.samples().count(), 5, "{name} frame {seq}");
        per_stream.entry(stream).or_default().push(seq);
    }
    for (stream, seqs) in per_stream.iter_mut() {
        seqs.sort_unstable();
        assert_eq!(*seqs, (0..frames).collect::<Vec<_>>(), "stream {stream}: one message per frame");
    }
    assert_eq!(per_stream.keys().copied().collect::<Vec<_>>(), [1, 2]);
}
