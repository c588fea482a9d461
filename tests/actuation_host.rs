//! Actuation outputs on the host backend, whole appliance over loopback:
//! replies and fixed destinations, each frame's message matched to its frame
//! and its payload checked against the CPU chain (result record, user words
//! from a host user stage, output samples); detection-only and flag-only
//! outputs send exactly the frames they should; a destination the kernel
//! refuses and a transmit ring too small for the messages are counted while
//! every frame is still processed (the deterministic full-ring case is in
//! tests/host_loop_core.rs); `frameloop send --expect-actuation`'s matcher sees every
//! answer; bad `[[actuate]]` tables stop `frameloop validate` naming the key.

mod actuation_support;
mod appliance_support;

use actuation_support::{collect, listener, output, sensor};
use appliance_support::{PATIENCE, Running, host_config, one_at_a_time, wait_for};
use frameloop::actuate::{When, config::Part};
use frameloop::host::{UserStage, UserStageResult};
use frameloop::ops::{OpSpec, default_chain};
use frameloop::ring::ResultRecord;
use frameloop::sender::{
    ExpectActuation, ExpectArgs, Pattern, SendArgs, run_sender_expecting, run_sender_on,
};
use frameloop::wire::actuation::{FLAG_DETECTED, FLAG_USER_REQUEST, decode};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

const FRAME_BYTES: usize = 4096;
const FRAMES: u64 = 24;
const SAMPLES: u32 = 37;

fn send_args(to: SocketAddr, count: u64) -> SendArgs {
    actuation_support::send_args(to, count, FRAME_BYTES, Pattern::Counter, 400.0)
}

/// User words: the frame sequence and its sample count; asks for an
/// actuation on every frame whose sequence is `1 mod 3`.
fn user_stage() -> UserStage {
    Box::new(|samples: &[f32], r: &ResultRecord| {
        let mut words = [0u32; 12];
        words[0] = r.frame_seq as u32;
        words[1] = samples.len() as u32;
        words[11] = 0xfeed_0000 | r.frame_seq as u32;
        UserStageResult { words, request_actuation: r.frame_seq % 3 == 1 }
    })
}

fn start(cfg: &frameloop::config::Config) -> Running {
    appliance_support::Running::start_with_options(cfg, |opts| opts.user_stage = Some(user_stage()))
}

/// The CPU chain's final samples for frame `seq`.
fn chain_samples(chain: &[OpSpec], seq: u64) -> Vec<f32> {
    actuation_support::chain_samples(chain, seq, FRAME_BYTES, Pattern::Counter)
}

#[test]
fn reply_messages_carry_each_frames_record_user_words_and_samples() {
    let _serial = one_at_a_time();
    let chain = default_chain();
    let mut cfg = host_config(chain.clone());
    cfg.ingest.allow = vec!["127.0.0.1".into()];
    cfg.actuate =
        vec![output(&["reply"], vec![Part::Record, Part::User, Part::Samples], SAMPLES, When::Every)];
    let running = start(&cfg);

    // The sensor: one socket that sends the frames and gets the replies.
    let (socket, replies) = sensor(running.addr());
    let args = send_args(running.addr(), FRAMES);
    let sent = run_sender_on(socket, &args, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(sent.frames, FRAMES);
    let got = collect(&replies, |g| g.len() as u64 >= FRAMES);
    let (report, results) = running.stop();

    let results: BTreeMap<u64, ResultRecord> = results.into_iter().map(|r| (r.frame_seq, r)).collect();
    assert_eq!(results.len() as u64, FRAMES, "every frame processed");
    assert_eq!(got.len() as u64, FRAMES, "one reply per frame");
    for (i, bytes) in got.iter().enumerate() {
        let m = decode(bytes).expect("a well-formed message");
        let h = m.header;
        let r = results.get(&h.frame_seq).expect("the reply answers a frame that was processed");
        assert_eq!((h.stream_id, h.ring_seq, h.output), (0, r.ring_seq, 0));
        assert_eq!(h.sender_ts_ns, r.sender_ts_ns, "the sender's timestamp echoed");
        assert_eq!(h.message_seq, i as u64 + 1, "the output's messages in order, none lost");
        assert_eq!(
            m.record.as_ref(),
            Some(r),
            "frame {}: the result record as the result thread saw it",
            h.frame_seq
        );
        let samples = chain_samples(&chain, h.frame_seq);
        let mut want_user = [0u32; 12];
        want_user[0] = h.frame_seq as u32;
        want_user[1] = samples.len() as u32;
        want_user[11] = 0xfeed_0000 | h.frame_seq as u32;
        assert_eq!(m.user, Some(want_user), "frame {}: the user stage's words", h.frame_seq);
        assert_eq!(m.samples().collect::<Vec<_>>(), samples[..SAMPLES as usize], "frame {}", h.frame_seq);
        assert_eq!(h.flags & FLAG_USER_REQUEST != 0, h.frame_seq % 3 == 1, "frame {}", h.frame_seq);
        assert_eq!(h.flags & FLAG_DETECTED != 0, r.detect_count > 0, "frame {}", h.frame_seq);
    }
    let a = report.actuation.expect("the report has the actuation outputs");
    let o = &a.outputs[0];
    assert_eq!((o.sent, o.send_errors, o.dropped, o.rate_limited, o.no_reply_address), (FRAMES, 0, 0, 0, 0));
    assert!(o.ready_to_sent.p50_us > 0.0 && o.ready_to_sent.max_us < PATIENCE.as_secs_f64() * 1e6);
}

#[test]
fn fixed_destinations_and_detection_and_flag_outputs_send_exactly_the_right_frames() {
    let _serial = one_at_a_time();
    // A threshold at the median of the frames' peaks: some frames detect, some do not.
    let mut chain = default_chain();
    let mut peaks: Vec<f32> =
        (0..FRAMES).map(|seq| chain_samples(&chain, seq).into_iter().fold(f32::MIN, f32::max)).collect();
    peaks.sort_by(f32::total_cmp);
    let level = peaks[peaks.len() / 2];
    *chain.last_mut().unwrap() = OpSpec::Threshold { level };
    let detects: Vec<u64> =
        (0..FRAMES).filter(|&seq| chain_samples(&chain, seq).iter().any(|&s| s > level)).collect();
    assert!(!detects.is_empty() && (detects.len() as u64) < FRAMES, "a mixed set: {detects:?}");
    let flagged: Vec<u64> = (0..FRAMES).filter(|s| s % 3 == 1).collect();

    let (one, one_addr) = listener();
    let (two, two_addr) = listener();
    let (a1, a2) = (one_addr.to_string(), two_addr.to_string());
    let mut cfg = host_config(chain);
    cfg.actuate = vec![
        output(&[&a1, &a2], vec![Part::Record], 0, When::Every),
        output(&[&a1], vec![Part::Record], 0, When::Detection),
        output(&[&a1], vec![Part::User], 0, When::Flag),
    ];
    let running = start(&cfg);
    let expected_at_one = FRAMES as usize + detects.len() + flagged.len();
    let sent =
        frameloop::sender::run_sender(&send_args(running.addr(), FRAMES), &AtomicBool::new(false), |_| {})
            .unwrap();
    assert_eq!(sent.frames, FRAMES);
    let at_one = collect(&one, |g| g.len() >= expected_at_one);
    let at_two = collect(&two, |g| g.len() as u64 >= FRAMES);
    let (report, results) = running.stop();
    assert_eq!(results.len() as u64, FRAMES);

    let frames_of = |got: &[Vec<u8>], output: u16| -> Vec<u64> {
        let mut v: Vec<u64> = got
            .iter()
            .map(|b| decode(b).expect("well formed").header)
            .filter(|h| h.output == output)
            .map(|h| h.frame_seq)
            .collect();
        v.sort_unstable();
        v
    };
    let every: Vec<u64> = (0..FRAMES).collect();
    assert_eq!(frames_of(&at_one, 0), every, "the every-frame output, first destination");
    assert_eq!(frames_of(&at_two, 0), every, "the every-frame output, second destination");
    assert_eq!(frames_of(&at_one, 1), detects, "the detection output sends the detecting frames only");
    assert_eq!(frames_of(&at_one, 2), flagged, "the flag output sends the flagged frames only");
    assert_eq!(at_one.len(), expected_at_one, "nothing more");
    assert!(frames_of(&at_two, 1).is_empty() && frames_of(&at_two, 2).is_empty());
    let a = report.actuation.unwrap();
    let sent: Vec<u64> = a.outputs.iter().map(|o| o.sent).collect();
    assert_eq!(sent, [2 * FRAMES, detects.len() as u64, flagged.len() as u64]);
}

#[test]
fn a_refused_destination_and_a_small_transmit_ring_are_counted_while_every_frame_is_processed() {
    let _serial = one_at_a_time();
    let mut cfg = host_config(default_chain());
    // Broadcast without SO_BROADCAST: the kernel refuses every send.
    let refused = output(&["255.255.255.255:9"], vec![Part::Record], 0, When::Every);
    cfg.actuate = vec![refused; 8];
    // Eight messages a frame into two slots: the loop may outrun the sender.
    cfg.ring.transmit_slots = 2;
    let running = start(&cfg);
    let sent =
        frameloop::sender::run_sender(&send_args(running.addr(), FRAMES), &AtomicBool::new(false), |_| {})
            .unwrap();
    assert_eq!(sent.frames, FRAMES);
    wait_for(
        "every frame processed",
        || (running.results().len() as u64 >= FRAMES).then_some(()),
        || format!("{:?}", running.app.loop_stats()),
    );
    let (report, _) = running.stop();
    assert_eq!(report.loop_stats.frames_processed, FRAMES, "the loop never waited for the network");
    let a = report.actuation.unwrap();
    let (sent, errors, dropped): (u64, u64, u64) =
        a.outputs.iter().fold((0, 0, 0), |(s, e, d), o| (s + o.sent, e + o.send_errors, d + o.dropped));
    assert_eq!(sent, 0, "the kernel refused every send");
    assert!(errors > 0, "refused sends are counted: {a:?}");
    // How many found the ring full depends on how the threads ran (the
    // deterministic case is tests/host_loop_core.rs); none goes uncounted.
    assert_eq!(errors + dropped, 8 * FRAMES, "every message accounted for: {a:?}");
}

#[test]
fn the_sender_matches_every_answer_to_its_frame_and_times_the_round_trip() {
    let _serial = one_at_a_time();
    let mut cfg = host_config(default_chain());
    cfg.ingest.allow = vec!["127.0.0.0/8".into()];
    cfg.actuate = vec![output(&["reply"], vec![Part::Samples], 8, When::Every)];
    let running = start(&cfg);
    let expect = ExpectArgs {
        expect_actuation: Some(ExpectActuation::Every),
        actuation_outputs: 1,
        actuation_late_ms: 10_000.0,
        actuation_wait_ms: 300,
        ..Default::default()
    };
    let args = send_args(running.addr(), FRAMES);
    let deadline = Instant::now() + PATIENCE;
    let (stats, rt) = run_sender_expecting(&args, &expect, &AtomicBool::new(false), |_| {}).unwrap();
    assert!(Instant::now() < deadline);
    let rt = rt.expect("a round-trip report");
    let (_report, results) = running.stop();
    assert_eq!((stats.frames, results.len() as u64), (FRAMES, FRAMES));
    assert_eq!(
        (rt.messages, rt.matched, rt.missing, rt.duplicate, rt.malformed, rt.unmatched),
        (FRAMES, FRAMES, 0, 0, 0, 0),
        "{rt:?}"
    );
    assert!(rt.round_trip.p50_us > 0.0 && rt.round_trip.max_us >= rt.round_trip.p50_us, "{rt:?}");
}

#[test]
fn the_shipped_actuation_config_plans_one_reply_output() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/configs/actuate-reply.toml");
    let cfg = frameloop::config::load(&path).expect("the bench config is valid");
    let plan = cfg.actuation_plan();
    assert_eq!(plan.outputs.len(), 1);
    assert_eq!(plan.outputs[0].destination, frameloop::actuate::Destination::Reply);
    assert_eq!(plan.max_message_bytes(), 64 + 192 + 64 * 4);
}

#[test]
fn bad_actuation_tables_stop_validate_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("frameloop-actuate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = [
        ("[[actuate]]\ndestination = \"reply\"\n", "actuate[0].destination"),
        (
            "[[actuate]]\ndestination = \"10.0.0.1:9\"\nsend = [\"samples\"]\nsamples = 100000\n",
            "actuate[0].max_bytes",
        ),
        (
            "[[actuate]]\ndestination = \"10.0.0.1:9\"\nwhen = \"detection\"\n[[chain]]\nop = \"unpack\"\nformat = \"u16\"\n",
            "actuate[0].when",
        ),
        ("[ring]\ntransmit_slots = 1\n", "ring.transmit_slots"),
        (
            "[[loop]]\nname = \"a\"\n[loop.ingest]\nbind = \"127.0.0.1:7100\"\n[[loop.actuate]]\ndestination = \"nowhere\"\n",
            "loop[0].actuate[0].destination",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_frameloop"))
            .args(["validate", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{text}: accepted");
        assert!(stderr.contains(key), "{text}: {key} not named in {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_compare_with_actuation_outputs_measures_the_round_trip_and_its_ping_pong_floor() {
    let _serial = one_at_a_time();
    let config = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/configs/actuate-reply.toml");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["bench", "--backend", "host", "--compare", "--json", "--frame-bytes", "8192"])
        .args(["--rate", "200", "--duration", "1", "--config", config.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the report as JSON");
    let frames = v["sender"]["frames"].as_u64().expect("the sender's frames");
    assert!(frames >= 150, "{v}");
    let rt = &v["actuation_round_trip"];
    assert_eq!(rt["matched"].as_u64(), Some(frames), "every frame answered: {rt}");
    assert_eq!(rt["missing"].as_u64(), Some(0), "{rt}");
    let (round_trip, floor) = (rt["round_trip"]["p50_us"].as_f64().unwrap(), &v["ping_pong_floor"]);
    let floor_p50 = floor["p50_us"].as_f64().expect("the ping-pong floor in the same run");
    assert!(floor_p50 > 0.0 && round_trip > 0.0, "{floor}");
    assert!(floor["max_us"].as_f64().unwrap() >= floor_p50, "{floor}");
}
