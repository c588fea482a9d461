//! Live reload on the CUDA backend, measured under a steady stream of frames
//! published into the mapped frame ring at a fixed rate: for parameter
//! changes written to the loop's parameter banks (the graph keeps running),
//! and for parameter and shape changes swapped by an in-place graph update
//! (`cuGraphExecUpdate`) and by a full rebuild and re-instantiation, all
//! interleaved in one run,
//! - the time from the reload call to the first result of the new generation
//!   seen by the host;
//! - the host-side switch gap (tear-down request to relaunch: no frame
//!   processed meanwhile; zero for a bank switch) and what was prepared while
//!   the old graph ran (for a bank switch: the bank write and publication);
//! - the processing gap on the GPU clock (`done_ns` of the first result of
//!   the new generation less that of the last of the old), against the
//!   interval between two consecutive results measured in the same run.
//!
//! Every result is checked against the CPU chain of its generation and every
//! frame must come back (policy `every`).
//! Usage: reload_bench [frames-per-second] [reps] [json-path]

use frameloop::backend::ResidentLoop;
use frameloop::config::{FusedChainMode, LoopConfig};
use frameloop::gpu::CudaLoop;
use frameloop::gpu::executor::GpuRuntime;
use frameloop::gpu::executor::SwapMode;
use frameloop::gpu::nvrtc::CacheDir;
use frameloop::gpu::test_rings::{MappedRings, fill_frame, publish};
use frameloop::ops::{CpuChain, OpSpec, SampleFormat};
use frameloop::ring::{OverrunPolicy, ResultReader, ResultRecord};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const FRAME_BYTES: usize = 4096;
const SLOTS: usize = 4096;

/// The chain of generation `g` with shape `shape` (0 or 1: five taps and no
/// delay, or seven taps and a delay operator).
fn chain_of(g: u32, shape: u32) -> Vec<OpSpec> {
    let n = if shape == 0 { 5 } else { 7 };
    let w = 1.0 + (g % 13) as f32 * 0.05;
    let mut chain = vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: (1.0 + g as f32 * 0.01) / 4096.0, offset: 0.0 },
        OpSpec::Fir { taps: (0..n).map(|k| w / (n as f32 + k as f32 * 0.1)).collect() },
        OpSpec::Stats,
        OpSpec::Threshold { level: 7.0 + (g % 7) as f32 * 0.5 },
    ];
    if shape == 1 {
        chain.insert(2, OpSpec::Delay { us: 0 });
    }
    chain
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
enum Kind {
    Parameters,
    Shape,
}

/// How a change is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
enum Path {
    /// The other parameter bank, published to the running graph.
    Banks,
    /// Stop, in-place graph update, relaunch.
    Update,
    /// Stop, rebuild and re-instantiation, relaunch.
    Reinstantiate,
}

impl Path {
    fn mode(self) -> SwapMode {
        match self {
            Path::Reinstantiate => SwapMode::Reinstantiate,
            _ => SwapMode::Update,
        }
    }
}

/// One swap as measured.
#[derive(Debug, Clone, serde::Serialize)]
struct Swap {
    kind: Kind,
    path: Path,
    banked: bool,
    in_place: bool,
    reload_to_first_result_us: f64,
    switch_gap_us: f64,
    prepare_us: f64,
    gpu_processing_gap_us: f64,
}

/// What the result thread saw when a generation first appeared.
#[derive(Debug, Clone, Copy)]
struct FirstSeen {
    at: Instant,
    gap_ns: u64,
}

#[derive(Debug, Default, serde::Serialize)]
struct Percentiles {
    n: usize,
    p50: f64,
    p90: f64,
    max: f64,
}

fn percentiles(mut v: Vec<f64>) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    Percentiles { n: v.len(), p50: at(0.5), p90: at(0.9), max: v[v.len() - 1] }
}

#[derive(Debug, serde::Serialize)]
struct Group {
    kind: Kind,
    path: Path,
    banked: usize,
    in_place: usize,
    reload_to_first_result_us: Percentiles,
    switch_gap_us: Percentiles,
    prepare_us: Percentiles,
    gpu_processing_gap_us: Percentiles,
}

#[derive(Debug, serde::Serialize)]
struct Section {
    fused_chain: FusedChainMode,
    frames_per_second: f64,
    frames_published: u64,
    results: u64,
    mismatches: u64,
    /// Interval between consecutive results of one generation (GPU clock):
    /// the frame period the gaps compare against.
    result_interval_us: Percentiles,
    groups: Vec<Group>,
    /// Update over re-instantiation, p50 of the switch gap, per kind.
    switch_gap_ratio_update_over_reinstantiate: BTreeMap<String, f64>,
    /// Parameter changes, p50 of reload -> first new result and of the GPU
    /// processing gap: banks over update and over re-instantiation.
    banks_over_update: BTreeMap<String, f64>,
    banks_over_reinstantiate: BTreeMap<String, f64>,
    swaps: Vec<Swap>,
}

fn run(rt: &Arc<GpuRuntime>, fused: FusedChainMode, rate: f64, reps: u32) -> Result<Section, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let rings = MappedRings::new(rt, SLOTS, FRAME_BYTES, SLOTS, OverrunPolicy::Every).map_err(|x| e(&x))?;
    let cfg = LoopConfig { fused_chain: fused, ..LoopConfig::default() };
    let mut lp = CudaLoop::new(
        Arc::clone(rt),
        Arc::clone(&rings.frames),
        Arc::clone(&rings.results),
        &chain_of(0, 0),
        cfg,
    )
    .map_err(|x| e(&x))?;
    let mut live = lp.take_cuda_live_chain().ok_or("no live chain")?;
    lp.launch().map_err(|x| e(&x))?;

    // Every generation's chain, known before it runs, for the result check.
    let plan: Vec<(Kind, Path)> = (0..reps)
        .flat_map(|_| {
            [
                (Kind::Parameters, Path::Banks),
                (Kind::Parameters, Path::Update),
                (Kind::Parameters, Path::Reinstantiate),
                (Kind::Shape, Path::Update),
                (Kind::Shape, Path::Reinstantiate),
            ]
        })
        .collect();
    let mut chains = vec![chain_of(0, 0)];
    let mut shape = 0;
    for (g, (kind, _)) in plan.iter().enumerate() {
        if *kind == Kind::Shape {
            shape ^= 1;
        }
        chains.push(chain_of(g as u32 + 1, shape));
    }

    let seed = 0xbe4c ^ frameloop::clock::realtime_ns();
    let stop = Arc::new(AtomicBool::new(false));
    let published = Arc::new(AtomicU64::new(0));
    let mut writer = rings.frames.writer().ok_or("the frame ring's writer is taken")?;
    let publisher = {
        let (stop, published) = (Arc::clone(&stop), Arc::clone(&published));
        std::thread::spawn(move || {
            let period = Duration::from_secs_f64(1.0 / rate);
            let start = Instant::now();
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                while Instant::now() < start + period.mul_f64(i as f64) {
                    std::hint::spin_loop();
                }
                let len = FRAME_BYTES - 2 * (i as usize % 7);
                while publish(&mut writer, seed, i, len).is_err() {
                    std::hint::spin_loop();
                }
                i += 1;
                published.store(i, Ordering::Release);
            }
        })
    };
    let first_seen: Arc<Mutex<BTreeMap<u32, FirstSeen>>> = Arc::default();
    let reader_stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (first_seen, stop) = (Arc::clone(&first_seen), Arc::clone(&reader_stop));
        let mut reader = ResultReader::new(Arc::clone(&rings.results));
        let mut cpus: Vec<CpuChain> = chains.iter().map(|c| CpuChain::new(c, FRAME_BYTES).unwrap()).collect();
        std::thread::spawn(move || {
            let (mut results, mut mismatches) = (0u64, 0u64);
            let mut intervals = Vec::new();
            let mut last: Option<ResultRecord> = None;
            let mut batch = Vec::new();
            let mut payload = vec![0u8; FRAME_BYTES];
            loop {
                batch.clear();
                let done = stop.load(Ordering::Acquire);
                reader.drain(&mut batch);
                for r in &batch {
                    if let Some(p) = last {
                        if r.param_generation != p.param_generation {
                            let seen = FirstSeen { at: Instant::now(), gap_ns: r.done_ns - p.done_ns };
                            first_seen.lock().unwrap().insert(r.param_generation, seen);
                        } else {
                            intervals.push((r.done_ns - p.done_ns) as f64 / 1e3);
                        }
                    }
                    let len = FRAME_BYTES - 2 * (r.frame_seq as usize % 7);
                    fill_frame(seed, r.frame_seq, &mut payload[..len]);
                    let ok = match cpus.get_mut(r.param_generation as usize) {
                        Some(cpu) => {
                            let want = cpu.run(&payload[..len]);
                            let s = want.stats.unwrap_or_default();
                            (r.sum - s.sum).abs() <= 1e-5 * s.sum.abs().max(1.0)
                                && Some((r.detect_count, r.first_detect_index)) == want.detect
                                && r.output_len as usize == want.output_len
                        }
                        None => false,
                    };
                    mismatches += u64::from(!ok);
                    results += 1;
                    last = Some(*r);
                }
                if done && batch.is_empty() {
                    return (results, mismatches, intervals);
                }
            }
        })
    };

    // Generation 0 runs a while first.
    std::thread::sleep(Duration::from_millis(200));
    let mut swaps = Vec::new();
    for (i, (kind, path)) in plan.iter().enumerate() {
        let g = i as u32 + 1;
        std::thread::sleep(Duration::from_millis(20));
        live.set_mode(path.mode());
        live.set_banks(*path == Path::Banks);
        let t0 = Instant::now();
        let report = live.swap(&chains[g as usize], g).map_err(|x| e(&x))?;
        let deadline = Instant::now() + Duration::from_secs(5);
        let seen = loop {
            if let Some(s) = first_seen.lock().unwrap().get(&g) {
                break *s;
            }
            if Instant::now() > deadline {
                return Err(format!("no result of generation {g} within 5 s"));
            }
            std::hint::spin_loop();
        };
        if report.banked != (*path == Path::Banks) {
            return Err(format!("generation {g}: {path:?} applied as {report:?}"));
        }
        swaps.push(Swap {
            kind: *kind,
            path: *path,
            banked: report.banked,
            in_place: report.in_place,
            reload_to_first_result_us: seen.at.duration_since(t0).as_secs_f64() * 1e6,
            switch_gap_us: report.gap.as_secs_f64() * 1e6,
            prepare_us: report.prepare.as_secs_f64() * 1e6,
            gpu_processing_gap_us: seen.gap_ns as f64 / 1e3,
        });
    }
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    publisher.join().map_err(|_| "the publisher panicked")?;
    let frames_published = published.load(Ordering::Acquire);
    let deadline = Instant::now() + Duration::from_secs(5);
    while rings.frames.consumed() < frames_published && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    reader_stop.store(true, Ordering::Release);
    let (results, mismatches, intervals) = reader.join().map_err(|_| "the reader panicked")?;
    lp.tear_down().map_err(|x| e(&x))?;

    let mut groups = Vec::new();
    let mut ratio = BTreeMap::new();
    for kind in [Kind::Parameters, Kind::Shape] {
        let mut p50 = BTreeMap::new();
        let paths: &[Path] = match kind {
            Kind::Parameters => &[Path::Banks, Path::Update, Path::Reinstantiate],
            Kind::Shape => &[Path::Update, Path::Reinstantiate],
        };
        for &path in paths {
            let of: Vec<&Swap> = swaps.iter().filter(|s| s.kind == kind && s.path == path).collect();
            let col = |f: fn(&Swap) -> f64| percentiles(of.iter().map(|s| f(s)).collect());
            let g = Group {
                kind,
                path,
                banked: of.iter().filter(|s| s.banked).count(),
                in_place: of.iter().filter(|s| s.in_place).count(),
                reload_to_first_result_us: col(|s| s.reload_to_first_result_us),
                switch_gap_us: col(|s| s.switch_gap_us),
                prepare_us: col(|s| s.prepare_us),
                gpu_processing_gap_us: col(|s| s.gpu_processing_gap_us),
            };
            if path != Path::Banks {
                p50.insert(path == Path::Update, g.switch_gap_us.p50);
            }
            groups.push(g);
        }
        ratio.insert(format!("{kind:?}"), p50[&true] / p50[&false]);
    }
    let params =
        |path: Path| groups.iter().find(|g| g.kind == Kind::Parameters && g.path == path).expect("planned");
    let versus = |other: Path| {
        let (b, o) = (params(Path::Banks), params(other));
        BTreeMap::from([
            (
                "reload_to_first_result_p50".to_string(),
                b.reload_to_first_result_us.p50 / o.reload_to_first_result_us.p50,
            ),
            ("gpu_processing_gap_p50".to_string(), b.gpu_processing_gap_us.p50 / o.gpu_processing_gap_us.p50),
        ])
    };
    let (banks_over_update, banks_over_reinstantiate) = (versus(Path::Update), versus(Path::Reinstantiate));
    Ok(Section {
        fused_chain: fused,
        frames_per_second: rate,
        frames_published,
        results,
        mismatches,
        result_interval_us: percentiles(intervals),
        groups,
        switch_gap_ratio_update_over_reinstantiate: ratio,
        banks_over_update,
        banks_over_reinstantiate,
        swaps,
    })
}

fn table(s: &Section) -> String {
    let mut t = format!(
        "fused_chain {:?}: {} frames published at {}/s, {} results, {} mismatches; result interval p50 {:.1} µs\n",
        s.fused_chain,
        s.frames_published,
        s.frames_per_second,
        s.results,
        s.mismatches,
        s.result_interval_us.p50
    );
    t += "kind        path           in place  reload->first result p50/p90/max µs   switch gap p50/p90/max µs   \
          prepared p50 µs   GPU processing gap p50/max µs\n";
    for g in &s.groups {
        let p = |p: &Percentiles| format!("{:.0}/{:.0}/{:.0}", p.p50, p.p90, p.max);
        t += &format!(
            "{:<11} {:<14} {:>2}/{:<2}     {:<36} {:<27} {:<17.0} {:.0}/{:.0}\n",
            format!("{:?}", g.kind),
            format!("{:?}", g.path),
            g.in_place,
            g.switch_gap_us.n,
            p(&g.reload_to_first_result_us),
            p(&g.switch_gap_us),
            g.prepare_us.p50,
            g.gpu_processing_gap_us.p50,
            g.gpu_processing_gap_us.max
        );
    }
    t += &format!(
        "switch gap, update / re-instantiation (p50): {:?}\n",
        s.switch_gap_ratio_update_over_reinstantiate
    );
    t += &format!(
        "parameter changes, banks / update (p50): {:?}\nparameter changes, banks / re-instantiation (p50): {:?}\n",
        s.banks_over_update, s.banks_over_reinstantiate
    );
    t
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rate: f64 = args.next().map_or(10_000.0, |a| a.parse().expect("frames per second must be a number"));
    let reps: u32 = args.next().map_or(20, |a| a.parse().expect("reps must be a number"));
    let json_path = args.next();
    let rt = match GpuRuntime::open(0, CacheDir::Default) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("reload_bench: {e}");
            std::process::exit(1);
        }
    };
    let mut sections = Vec::new();
    for fused in [FusedChainMode::Auto, FusedChainMode::Off] {
        match run(&rt, fused, rate, reps) {
            Ok(s) => {
                println!("{}", table(&s));
                sections.push(s);
            }
            Err(e) => {
                eprintln!("reload_bench ({fused:?}): {e}");
                std::process::exit(1);
            }
        }
    }
    if let Some(p) = json_path {
        std::fs::write(&p, serde_json::to_string_pretty(&sections).expect("serialisable"))
            .unwrap_or_else(|e| eprintln!("cannot write {p}: {e}"));
    }
    let bad = sections.iter().any(|s| s.mismatches > 0 || s.results != s.frames_published);
    if bad {
        eprintln!("reload_bench: a result did not match its generation's CPU chain, or a frame was lost");
        std::process::exit(2);
    }
}
