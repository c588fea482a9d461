//! Shared by the live-reload tests of the whole appliance (tests/reload.rs on
//! the host backend, tests/gpu_reload.rs on the CUDA backend): the chains of
//! each generation, an appliance that collects every result, and the run of
//! 50 parameter and 5 shape reloads under a loopback stream.

#![allow(dead_code)] // each test binary uses its own subset

use crate::appliance_support::{PATIENCE, check_result, check_sequences, one_at_a_time, reference_chain};
use frameloop::app::{Appliance, StartOptions};
use frameloop::config::Config;
use frameloop::ops::{OpSpec, default_chain};
use frameloop::reload::ReloadOutcome;
use frameloop::ring::ResultRecord;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub const FRAME_BYTES: usize = 1024;
pub const PARAM_RELOADS: u32 = 50;
pub const SHAPE_RELOADS: u32 = 5;

/// The chain of generation `g`: its scale, taps and threshold level move
/// with `g` (parameters); every 11th generation also changes the tap count
/// and adds or removes a delay operator (shape).
pub fn chain_of(g: u32) -> Vec<OpSpec> {
    let shape = g / 11;
    let taps = [5usize, 3, 7, 9, 5, 3][shape as usize % 6];
    let mut chain = default_chain();
    chain[0] = OpSpec::Unpack {
        format: frameloop::ops::SampleFormat::U16,
        scale: (1.0 + g as f32 * 0.03) / 4096.0,
        offset: 0.0,
    };
    let weight = 1.0 + (g % 4) as f32 * 0.1;
    chain[1] = OpSpec::Fir { taps: (0..taps).map(|k| weight / (taps as f32 + k as f32 * 0.01)).collect() };
    chain[3] = OpSpec::Threshold { level: 7.0 + (g % 9) as f32 * 0.5 };
    if shape % 2 == 1 {
        chain.insert(2, OpSpec::Delay { us: 0 });
    }
    chain
}

pub fn is_shape_change(g: u32) -> bool {
    g.is_multiple_of(11)
}

/// The appliance with every result collected, and the newest generation seen.
pub struct Rig {
    pub app: Appliance,
    pub results: Arc<Mutex<Vec<ResultRecord>>>,
    pub newest: Arc<AtomicU32>,
}

pub fn start(cfg: &Config, backend: &str) -> Rig {
    let results = Arc::new(Mutex::new(Vec::new()));
    let newest = Arc::new(AtomicU32::new(0));
    let (sink, seen) = (Arc::clone(&results), Arc::clone(&newest));
    let on_result = Box::new(move |r: &ResultRecord| {
        sink.lock().unwrap().push(*r);
        seen.fetch_max(r.param_generation, Ordering::Relaxed);
    });
    let app = Appliance::start(
        cfg,
        StartOptions { histogram_log: None, on_result: Some(on_result), ..Default::default() },
    )
    .expect("the appliance starts");
    assert_eq!(app.backend().name(), backend);
    Rig { app, results, newest }
}

pub fn wait_generation(rig: &Rig, g: u32) {
    let deadline = Instant::now() + PATIENCE;
    while rig.newest.load(Ordering::Relaxed) < g {
        assert!(Instant::now() < deadline, "no result of generation {g}; loop {:?}", rig.app.loop_stats());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The appliance of `cfg` (backend `backend`) under `frames` frames at
/// `rate` frames/s takes 50 parameter and 5 shape reloads (and at the 20th
/// an invalid and a restart-needing config that change nothing): no frame
/// lost, generations only forward, every result exactly its generation's
/// chain and told apart from its neighbours'.
pub fn reloads_under_load(cfg: &Config, frames: u64, rate: f64, backend: &str) {
    let _serial = one_at_a_time();
    let mut rig = start(cfg, backend);
    let args = SendArgs {
        to: rig.app.local_addr().to_string(),
        rate,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: FRAME_BYTES + 48,
        count: Some(frames),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let sender = std::thread::spawn(move || run_sender(&args, &AtomicBool::new(false), |_| {}));

    // Generation 0 (the start-up chain) runs some frames first.
    let deadline = Instant::now() + PATIENCE;
    while rig.results.lock().unwrap().len() < 20 {
        assert!(Instant::now() < deadline, "no results; ingest {:?}", rig.app.ingest());
        std::thread::sleep(Duration::from_millis(1));
    }
    let total = PARAM_RELOADS + SHAPE_RELOADS;
    for g in 1..=total {
        let new = Config { chain: chain_of(g), ..cfg.clone() };
        let outcome = rig.app.reload(new);
        let want = if is_shape_change(g) {
            ReloadOutcome::AppliedShape { generation: g }
        } else {
            ReloadOutcome::AppliedParams { generation: g }
        };
        assert_eq!(outcome, want, "reload {g}");
        if g == 20 {
            // Invalid (a NaN level) and restart-needing (slot count)
            // configs change nothing, not even the generation.
            let mut bad = Config { chain: chain_of(99), ..cfg.clone() };
            bad.chain[3] = OpSpec::Threshold { level: f32::NAN };
            assert_eq!(rig.app.reload(bad), ReloadOutcome::RejectedInvalid);
            let mut restart = Config { chain: chain_of(98), ..cfg.clone() };
            restart.ring.slots /= 2;
            assert_eq!(rig.app.reload(restart), ReloadOutcome::RefusedRestart);
            let unchanged = Config { chain: chain_of(g), ..cfg.clone() };
            assert_eq!(rig.app.reload(unchanged), ReloadOutcome::Unchanged);
        }
        wait_generation(&rig, g);
    }
    let sent = sender.join().expect("the sender does not panic").expect("the sender runs");
    assert_eq!(sent.frames, frames, "{sent:?}");
    assert_eq!(rig.app.param_generation(), total);
    let metrics = rig.app.metrics_snapshot();
    assert_eq!(metrics.param_generation, total);
    let count = |label: &str| metrics.reloads.iter().find(|(l, _)| l == label).map(|(_, n)| *n);
    assert_eq!(count("applied_params"), Some(u64::from(PARAM_RELOADS)));
    assert_eq!(count("applied_shape"), Some(u64::from(SHAPE_RELOADS)));
    assert_eq!((count("refused_restart"), count("rejected_invalid")), (Some(1), Some(1)));

    let deadline = Instant::now() + PATIENCE;
    while (rig.results.lock().unwrap().len() as u64) < frames {
        assert!(Instant::now() < deadline, "results missing; ingest {:?}", rig.app.ingest());
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(rig.app.drain(PATIENCE));
    let report = rig.app.stop().expect("the appliance stops cleanly");
    let results = rig.results.lock().unwrap().clone();

    // Zero frames lost: one result per frame sent, each frame once.
    assert_eq!(results.len() as u64, frames);
    check_sequences(&results);
    let seen: BTreeSet<u64> = results.iter().map(|r| r.frame_seq).collect();
    assert_eq!(seen, (0..frames).collect(), "each frame processed exactly once");
    assert_eq!(report.ingest.datagrams_dropped() + report.ingest.frames_dropped(), 0, "{:?}", report.ingest);
    assert!(results.iter().all(|r| r.skipped_before == 0));

    // Generations only move forward, and every one of them ran.
    assert!(results.windows(2).all(|w| w[0].param_generation <= w[1].param_generation));
    let generations: BTreeSet<u32> = results.iter().map(|r| r.param_generation).collect();
    assert_eq!(generations, (0..=total).collect());

    // Each result is exactly its generation's chain, and tells it apart
    // from the chains just before and after.
    let chains: Vec<Vec<OpSpec>> = (0..=total + 1).map(chain_of).collect();
    let mut told_apart = vec![false; total as usize + 1];
    for r in &results {
        let payload = Pattern::Random.frame(r.stream_id, r.frame_seq, FRAME_BYTES);
        let g = r.param_generation as usize;
        check_result(r, &reference_chain(&chains[g], &payload));
        let differs = |other: &[OpSpec]| {
            let o = reference_chain(other, &payload);
            o.detect != Some((r.detect_count, r.first_detect_index))
                || o.stats.is_some_and(|s| (s.sum - r.sum).abs() > 1e-3 * r.sum.abs().max(1.0))
        };
        let before = g.checked_sub(1).is_none_or(|p| differs(&chains[p]));
        if before && differs(&chains[g + 1]) {
            told_apart[g] = true;
        }
    }
    assert!(told_apart.iter().all(|&t| t), "generations not told apart: {told_apart:?}");
}
