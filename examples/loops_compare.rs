//! Two streams at the same rate, served three ways, latency per stream:
//! - `one-loop`: one loop serving both streams on one port;
//! - `two-loops-shared-port`: two loops on one port, its receiver routing
//!   each loop its stream by id;
//! - `two-loops-two-ports`: two loops, each on its own port with its own
//!   receiver and sender.
//!
//! Per stream: frames sent and seen, and the percentiles of end-to-end
//! latency (sender timestamp to the result seen by the host) and of
//! publish-to-seen (frame published in the ring to its result seen), both
//! on the host clock, recorded in the loops' result callbacks after a
//! warm-up second. Ratios are against `one-loop` of the same run.
//!
//! Usage: loops_compare [--backend cuda|host] [--rate-per-stream FPS]
//!        [--duration S] [--frame-bytes N] [--order 1,2,0] [--json PATH]
//!        [--scale N --gpus G]
//! (`--order`: the order the variants run in, by their number above
//! counting from 0; the table lists them in that order too).
//!
//! With `--scale N` the variants are instead `loops-1` .. `loops-N`: k
//! loops, loop i on GPU i mod G, each on its own port with one stream and
//! its own sender, all at the same rate; the table adds the aggregate
//! frames/s seen after the warm-up.

use frameloop::app::{LoopSet, plan_loops};
use frameloop::clock;
use frameloop::config::{BackendChoice, parse};
use frameloop::ring::ResultRecord;
use frameloop::sender::{GsoMode, Pattern, SendArgs, run_sender};
use frameloop::topology::Topology;
use hdrhistogram::Histogram;
use std::collections::BTreeMap;
use std::net::UdpSocket;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const WARMUP_NS: u64 = 1_000_000_000;

struct Options {
    backend: String,
    rate: f64,
    duration: f64,
    frame_bytes: u64,
    json: Option<String>,
    order: Vec<usize>,
    scale: usize,
    gpus: usize,
}

fn options() -> Options {
    let mut o = Options {
        backend: "cuda".into(),
        rate: 10_000.0,
        duration: 10.0,
        frame_bytes: 4096,
        json: None,
        order: vec![0, 1, 2],
        scale: 0,
        gpus: 1,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--backend" => o.backend = value(),
            "--rate-per-stream" => o.rate = value().parse().expect("--rate-per-stream: a number"),
            "--duration" => o.duration = value().parse().expect("--duration: seconds"),
            "--frame-bytes" => o.frame_bytes = value().parse().expect("--frame-bytes: a number"),
            "--json" => o.json = Some(value()),
            "--scale" => o.scale = value().parse().expect("--scale: a number of loops"),
            "--gpus" => o.gpus = value().parse::<usize>().expect("--gpus: a number").max(1),
            "--order" => {
                o.order = value().split(',').map(|v| v.parse().expect("--order: numbers 0 to 2")).collect();
                assert!(o.order.iter().all(|&v| v < 3), "--order: numbers 0 to 2");
            }
            other => panic!("unknown argument {other}; see the usage in examples/loops_compare.rs"),
        }
    }
    o
}

fn free_port() -> u16 {
    UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// The config of one variant: `loops` is `(name, streams, port)` per loop.
fn config(o: &Options, loops: &[(&str, &[u32], u16)]) -> String {
    let slot = (o.frame_bytes as usize).next_multiple_of(4096).max(4096);
    let mut text = format!(
        "backend = \"{}\"\n[ring]\nslots = 256\nslot_bytes = {slot}\n[ingest]\ntransport = \"udp\"\n\
         frame_timeout_ms = 100\n[[chain]]\nop = \"unpack\"\nformat = \"u16\"\n[[chain]]\nop = \"stats\"\n",
        o.backend
    );
    for (i, (name, streams, port)) in loops.iter().enumerate() {
        let gpu = i % o.gpus;
        text.push_str(&format!(
            "[[loop]]\nname = \"{name}\"\ngpu = {gpu}\nstreams = {streams:?}\n[loop.ingest]\nbind = \"127.0.0.1:{port}\"\n"
        ));
    }
    text
}

/// Latencies of one stream, in ns.
struct Stream {
    end_to_end: Histogram<u64>,
    publish_to_seen: Histogram<u64>,
    frames_seen: u64,
}

impl Stream {
    fn new() -> Self {
        let h = || Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap();
        Self { end_to_end: h(), publish_to_seen: h(), frames_seen: 0 }
    }
}

type Seen = Arc<Mutex<BTreeMap<(String, u32), Stream>>>;

fn percentiles(h: &Histogram<u64>) -> serde_json::Value {
    let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    serde_json::json!({
        "count": h.len(), "p50_us": us(0.5), "p99_us": us(0.99), "p99_9_us": us(0.999),
        "max_us": h.max() as f64 / 1000.0,
    })
}

/// Runs one variant: starts its loops, sends `senders` (`(port, streams)`)
/// for the duration, stops, and returns the per-stream figures.
fn run_variant(
    o: &Options,
    name: &str,
    loops: &[(&str, &[u32], u16)],
    senders: &[(u16, u32)],
) -> serde_json::Value {
    let cfg = parse(&config(o, loops)).unwrap_or_else(|e| panic!("{name}: {e}"));
    let cuda = cfg.backend == BackendChoice::Cuda;
    let machine = if cuda {
        Topology::read(std::path::Path::new("/sys")).unwrap()
    } else {
        Topology { gpus: Vec::new(), nics: Vec::new(), numa_nodes: Vec::new() }
    };
    let plans = plan_loops(&cfg, cuda, &machine, &[]).unwrap();
    let seen: Seen = Arc::default();
    // Set once the loops run: results of frames sent in the first second after are left out.
    let counted_from = Arc::new(AtomicU64::new(u64::MAX));
    let set = LoopSet::start(&cfg, plans, None, |loop_name| {
        let (seen, loop_name, from) = (Arc::clone(&seen), loop_name.to_string(), Arc::clone(&counted_from));
        Some(Box::new(move |r: &ResultRecord| {
            let now = clock::realtime_ns();
            if r.sender_ts_ns < from.load(Ordering::Relaxed) {
                return;
            }
            let mut seen = seen.lock().unwrap();
            let s = seen.entry((loop_name.clone(), r.stream_id)).or_insert_with(Stream::new);
            s.frames_seen += 1;
            let _ = s.end_to_end.record(now.saturating_sub(r.sender_ts_ns).max(1));
            let _ = s.publish_to_seen.record(now.saturating_sub(r.published_ns).max(1));
        }))
    })
    .unwrap_or_else(|e| panic!("{name}: {e}"));
    counted_from.store(clock::realtime_ns() + WARMUP_NS, Ordering::Relaxed);
    let stop = AtomicBool::new(false);
    let sent: Vec<_> = std::thread::scope(|scope| {
        let handles: Vec<_> = senders
            .iter()
            .map(|&(port, streams)| {
                let args = SendArgs {
                    to: format!("127.0.0.1:{port}"),
                    rate: o.rate * streams as f64,
                    frame_bytes: o.frame_bytes,
                    packet_bytes: 8972,
                    count: None,
                    duration: Some(o.duration + 1.0),
                    streams,
                    pattern: Pattern::Counter,
                    gso: GsoMode::Auto,
                    pacing: Default::default(),
                    catch_up: frameloop::sender::DEFAULT_CATCH_UP,
                    bind: None,
                    link_gbps: None,
                };
                let stop = &stop;
                scope.spawn(move || run_sender(&args, stop, |_| {}).expect("the sender runs"))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let report = set.stop();
    let down = report.down();
    let drops: Vec<_> = report
        .loops
        .iter()
        .map(|l| {
            let r = l.report.as_ref();
            serde_json::json!({
                "loop": l.plan.name,
                "datagrams_dropped": r.map(|r| r.ingest.datagrams_dropped()),
                "ring_full": r.map(|r| r.ingest.ring_full),
                "frames_processed": r.map(|r| r.loop_stats.frames_processed),
            })
        })
        .collect();
    let seen = seen.lock().unwrap();
    let streams: Vec<_> = seen
        .iter()
        .map(|((l, s), v)| {
            serde_json::json!({
                "loop": l, "stream": s, "frames_seen_after_warmup": v.frames_seen,
                "end_to_end": percentiles(&v.end_to_end), "publish_to_seen": percentiles(&v.publish_to_seen),
            })
        })
        .collect();
    serde_json::json!({
        "variant": name,
        "frames_sent": sent.iter().map(|s| s.frames).sum::<u64>(),
        "send_errors": sent.iter().map(|s| format!("{:?}", s.errors)).collect::<Vec<_>>(),
        "down": down,
        "loops": drops,
        "streams": streams,
    })
}

fn main() {
    frameloop::app::init_logging();
    let o = options();
    let (p1, p2, p3, p4) = (free_port(), free_port(), free_port(), free_port());
    if o.scale > 0 {
        return scale(&o);
    }
    let variants: Vec<serde_json::Value> = o
        .order
        .iter()
        .map(|&v| match v {
            0 => run_variant(&o, "one-loop", &[("both", &[0, 1], p1)], &[(p1, 2)]),
            1 => run_variant(&o, "two-loops-shared-port", &[("s0", &[0], p2), ("s1", &[1], p2)], &[(p2, 2)]),
            _ => run_variant(
                &o,
                "two-loops-two-ports",
                &[("a", &[0], p3), ("b", &[0], p4)],
                &[(p3, 1), (p4, 1)],
            ),
        })
        .collect();
    // The table: one row per stream, ratios of p50 and p99.9 against one-loop's same stream id.
    let one_loop = variants.iter().find(|v| v["variant"] == "one-loop");
    let base = |stream: u64, key: &str| {
        one_loop?["streams"]
            .as_array()
            .and_then(|v| v.iter().find(|s| s["stream"].as_u64() == Some(stream)))
            .and_then(|s| s["end_to_end"][key].as_f64())
    };
    println!(
        "# {} backend, {} frames/s per stream, {} B frames, {} s (after a 1 s warm-up)",
        o.backend, o.rate, o.frame_bytes, o.duration
    );
    println!(
        "{:<24} {:<6} {:>6} {:>8} {:>10} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "variant",
        "loop",
        "stream",
        "frames",
        "e2e p50",
        "e2e p99",
        "e2e p99.9",
        "pub->seen",
        "p50 x",
        "p99.9 x"
    );
    for v in &variants {
        for s in v["streams"].as_array().into_iter().flatten() {
            let stream = s["stream"].as_u64().unwrap_or(0);
            let e = &s["end_to_end"];
            let ratio = |key: &str| match (e[key].as_f64(), base(stream, key)) {
                (Some(x), Some(b)) if b > 0.0 => format!("{:.2}", x / b),
                _ => "-".into(),
            };
            println!(
                "{:<24} {:<6} {:>6} {:>8} {:>8.1}us {:>8.1}us {:>8.1}us {:>8.1}us {:>8} {:>8}",
                v["variant"].as_str().unwrap_or(""),
                s["loop"].as_str().unwrap_or(""),
                stream,
                s["frames_seen_after_warmup"],
                e["p50_us"].as_f64().unwrap_or(f64::NAN),
                e["p99_us"].as_f64().unwrap_or(f64::NAN),
                e["p99_9_us"].as_f64().unwrap_or(f64::NAN),
                s["publish_to_seen"]["p50_us"].as_f64().unwrap_or(f64::NAN),
                ratio("p50_us"),
                ratio("p99_9_us"),
            );
        }
        println!("{:<24} sent {} frames, down {}, loops {}", "", v["frames_sent"], v["down"], v["loops"]);
    }
    if let Some(p) = &o.json {
        let all = serde_json::json!({
            "backend": o.backend, "rate_per_stream": o.rate, "frame_bytes": o.frame_bytes,
            "duration_s": o.duration, "variants": variants,
        });
        std::fs::write(p, serde_json::to_string_pretty(&all).unwrap())
            .unwrap_or_else(|e| eprintln!("{p}: {e}"));
    }
}

/// `--scale N`: 1 to N loops, each with its own port, stream and sender.
fn scale(o: &Options) {
    let names: Vec<String> = (0..o.scale).map(|i| format!("l{i}")).collect();
    let ports: Vec<u16> = (0..o.scale).map(|_| free_port()).collect();
    println!(
        "# {} backend, {} GPU(s), {} frames/s per stream, {} B frames, {} s (after a 1 s warm-up)",
        o.backend, o.gpus, o.rate, o.frame_bytes, o.duration
    );
    println!(
        "{:<9} {:>14} {:>12} {:>6} {:>4} {:>8} {:>10} {:>10} {:>10} {:>8}",
        "variant",
        "aggregate f/s",
        "dropped",
        "loop",
        "gpu",
        "frames",
        "e2e p50",
        "e2e p99",
        "e2e p99.9",
        "pub p50"
    );
    let mut variants = Vec::new();
    for k in 1..=o.scale {
        let loops: Vec<(&str, &[u32], u16)> =
            (0..k).map(|i| (names[i].as_str(), &[0u32][..], ports[i])).collect();
        let senders: Vec<(u16, u32)> = ports[..k].iter().map(|&p| (p, 1)).collect();
        let mut v = run_variant(o, &format!("loops-{k}"), &loops, &senders);
        let streams = v["streams"].as_array().cloned().unwrap_or_default();
        let seen: u64 = streams.iter().filter_map(|s| s["frames_seen_after_warmup"].as_u64()).sum();
        let aggregate = seen as f64 / o.duration;
        let dropped: u64 = v["loops"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| l["datagrams_dropped"].as_u64().unwrap_or(0) + l["ring_full"].as_u64().unwrap_or(0))
            .sum();
        v["aggregate_frames_per_s"] = aggregate.into();
        for (i, s) in streams.iter().enumerate() {
            let e = &s["end_to_end"];
            let lead = if i == 0 {
                format!("{:<9} {:>14.0} {:>12}", format!("loops-{k}"), aggregate, dropped)
            } else {
                format!("{:<9} {:>14} {:>12}", "", "", "")
            };
            let loop_name = s["loop"].as_str().unwrap_or("");
            let gpu = names.iter().position(|n| n == loop_name).map_or(0, |i| i % o.gpus);
            println!(
                "{lead} {:>6} {:>4} {:>8} {:>8.1}us {:>8.1}us {:>8.1}us {:>6.1}us",
                loop_name,
                gpu,
                s["frames_seen_after_warmup"],
                e["p50_us"].as_f64().unwrap_or(f64::NAN),
                e["p99_us"].as_f64().unwrap_or(f64::NAN),
                e["p99_9_us"].as_f64().unwrap_or(f64::NAN),
                s["publish_to_seen"]["p50_us"].as_f64().unwrap_or(f64::NAN),
            );
        }
        variants.push(v);
    }
    if let Some(p) = &o.json {
        let all = serde_json::json!({
            "backend": o.backend, "gpus": o.gpus, "rate_per_stream": o.rate, "frame_bytes": o.frame_bytes,
            "duration_s": o.duration, "variants": variants,
        });
        std::fs::write(p, serde_json::to_string_pretty(&all).unwrap())
            .unwrap_or_else(|e| eprintln!("{p}: {e}"));
    }
}
