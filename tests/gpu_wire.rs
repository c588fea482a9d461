//! Wire to result on the GPU: the real sender over loopback UDP into the
//! frame ring in mapped memory, the GPU-resident loop detecting and
//! processing each frame. Every processed frame is checked against the CPU
//! reference of the bytes the sender sent, also when the GPU is made slower
//! than the sender (a delay stage) so that the ring overruns under both
//! policies. Needs a GPU: `cargo test --test gpu_wire -- --include-ignored`.

mod appliance_support;

use appliance_support::{Running, check_result, check_timestamps, reference_chain, wait_for};
use frameloop::config::{BackendChoice, Config};
use frameloop::ops::{OpSpec, SampleFormat};
use frameloop::ring::OverrunPolicy;
use frameloop::ring::layout::RESULT_GPU_CLOCK;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use std::collections::BTreeSet;
use std::sync::atomic::AtomicBool;

const FRAME_BYTES: usize = 8192;

fn chain(delay_us: u32) -> Vec<OpSpec> {
    let mut c = vec![OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.0 }];
    if delay_us > 0 {
        c.push(OpSpec::Delay { us: delay_us });
    }
    c.extend([
        OpSpec::Fir { taps: vec![0.0625, 0.25, 0.375, 0.25, 0.0625] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 8.0 },
    ]);
    c
}

fn cuda_config(chain: Vec<OpSpec>, slots: usize, policy: OverrunPolicy) -> Config {
    let mut cfg = Config { backend: BackendChoice::Cuda, chain, ..Config::default() };
    cfg.ingest.bind = "127.0.0.1:0".into();
    cfg.ring.slots = slots;
    cfg.ring.slot_bytes = FRAME_BYTES;
    cfg.ring.policy = policy;
    cfg
}

/// Sends `count` random-pattern frames at `rate` and waits until the
/// appliance has published or dropped all of them and the loop caught up.
fn stream(running: &Running, count: u64, rate: f64) {
    let args = SendArgs {
        to: running.addr().to_string(),
        rate,
        frame_bytes: FRAME_BYTES as u64,
        packet_bytes: 8972,
        count: Some(count),
        duration: None,
        streams: 1,
        pattern: Pattern::Random,
        gso: GsoMode::Auto,
        pacing: Default::default(),
        catch_up: frameloop::sender::DEFAULT_CATCH_UP,
        bind: None,
        link_gbps: None,
    };
    let stats = run_sender(&args, &AtomicBool::new(false), |_| {}).expect("the sender runs");
    assert_eq!(stats.frames, count);
    wait_for(
        "every frame published or dropped",
        || {
            let i = running.app.ingest();
            (i.frames_complete + i.frames_incomplete + i.ring_full >= count).then_some(())
        },
        || format!("{:?}", running.app.ingest()),
    );
    assert!(running.app.drain(std::time::Duration::from_secs(10)), "the GPU loop consumed the ring");
}

/// Every result matches the CPU reference of the frame the sender sent.
fn check_all(chain: &[OpSpec], results: &[frameloop::ring::ResultRecord]) -> BTreeSet<u64> {
    let mut seen = BTreeSet::new();
    for r in results {
        assert!(seen.insert(r.frame_seq), "frame {} processed twice", r.frame_seq);
        assert_ne!(r.result_flags & RESULT_GPU_CLOCK, 0, "results come from the GPU");
        let payload = Pattern::Random.frame(r.stream_id, r.frame_seq, FRAME_BYTES);
        check_result(r, &reference_chain(chain, &payload));
    }
    seen
}

#[test]
#[ignore = "needs a GPU"]
fn every_frame_sent_over_udp_is_processed_on_the_gpu() {
    let chain = chain(0);
    let mut running = Running::start_any(&cuda_config(chain.clone(), 64, OverrunPolicy::Every));
    assert_eq!(running.app.backend().name(), "cuda");
    // Re-measuring the GPU clock while the resident graph runs (it was
    // launched by start) must neither wait for the graph nor disturb it.
    let before = running.app.recalibrate_clock().expect("recalibration works").expect("a GPU clock");
    assert!(before.error_ns > 0 && before.error_ns < 50_000, "error bound {} ns", before.error_ns);
    stream(&running, 2000, 2000.0);
    let results = running.wait_results(2000);
    let after = running.app.recalibrate_clock().expect("recalibration works").expect("a GPU clock");
    let (report, _) = running.stop();
    let seen = check_all(&chain, &results);
    assert_eq!(seen.len(), 2000, "every frame processed once");
    // GPU times on the host clock keep the order of a frame's life, within
    // the calibration's error bound.
    assert!(
        report.clock_error_ns > 0 && report.clock_error_ns < 50_000,
        "clock error {}",
        report.clock_error_ns
    );
    // The GPU clock drifts against the host's (tens of ppm in a VM): map each
    // frame's GPU times with the offset interpolated between the two
    // measurements around the stream, as the result thread extrapolates it.
    let slack = before.error_ns.max(after.error_ns);
    let span = after.measured_at_ns.saturating_sub(before.measured_at_ns).max(1) as f64;
    let offset_at = |host_ns: u64| {
        let t = host_ns.saturating_sub(before.measured_at_ns) as f64 / span;
        before.offset_ns + ((after.offset_ns - before.offset_ns) as f64 * t.min(1.0)) as i64
    };
    for r in &results {
        let offset = offset_at(r.published_ns);
        let on_host = |gpu_ns: u64| gpu_ns.saturating_add_signed(offset);
        check_timestamps(&frameloop::ring::ResultRecord {
            detect_ns: on_host(r.detect_ns).max(r.published_ns),
            done_ns: on_host(r.done_ns).max(r.published_ns),
            ..*r
        });
        assert!(
            on_host(r.detect_ns) + slack >= r.published_ns,
            "frame {} detected before published",
            r.frame_seq
        );
        assert!(r.done_ns >= r.detect_ns, "frame {} done before detected", r.frame_seq);
    }
    assert_eq!(report.ingest.ring_full, 0);
    // The frame ring is host memory registered with the GPU, in huge pages
    // (ring.huge_pages defaults to true) where the kernel gives them.
    let ring = &report.frame_ring;
    assert_eq!(ring.kind, "cuda-registered", "{ring:?}");
    let mode = frameloop::ring::pages::transparent_huge_page_mode();
    if frameloop::ring::pages::huge_pages_enabled(mode.as_deref()) {
        assert!(ring.huge_page_bytes.unwrap_or(0) * 2 >= ring.bytes, "{ring:?}");
    }
}

/// The GPU holds each frame for 1 ms while the sender sends one every
/// 200 µs: under `every` the ring fills and ingest drops whole frames
/// (counted), and every frame that is processed is byte-exact and in order.
#[test]
#[ignore = "needs a GPU"]
fn a_slow_gpu_under_policy_every_drops_at_ingest_and_stays_exact() {
    let chain = chain(1000);
    let running = Running::start_any(&cuda_config(chain.clone(), 4, OverrunPolicy::Every));
    stream(&running, 400, 5000.0);
    let (report, results) = running.stop();
    let seen = check_all(&chain, &results);
    assert!(report.ingest.ring_full > 0, "the slow GPU made the ring overrun: {:?}", report.ingest);
    assert_eq!(seen.len() as u64 + report.ingest.ring_full, 400, "processed + dropped = sent");
    assert!(
        results.windows(2).all(|w| w[0].ring_seq + 1 == w[1].ring_seq),
        "every published frame, in order"
    );
}

/// The same slow GPU under `latest`: the loop skips to the newest frame
/// (skips counted), no slot it reads is overwritten, every result is exact.
#[test]
#[ignore = "needs a GPU"]
fn a_slow_gpu_under_policy_latest_skips_and_stays_exact() {
    let chain = chain(1000);
    let running = Running::start_any(&cuda_config(chain.clone(), 4, OverrunPolicy::Latest));
    stream(&running, 400, 5000.0);
    let (report, results) = running.stop();
    let seen = check_all(&chain, &results);
    let skipped: u64 = results.iter().map(|r| r.skipped_before).sum();
    assert!(skipped > 0, "the loop skipped frames");
    let published = report.ingest.frames_complete + report.ingest.frames_incomplete;
    assert_eq!(
        seen.len() as u64 + skipped,
        published,
        "processed + skipped = published: {:?}",
        report.ingest
    );
    assert_eq!(results.last().map(|r| r.ring_seq), Some(published), "the newest frame is processed");
}
