//! The live view against the running appliance (host backend), seen the way
//! a person sees it: `frameloop run` with a stream running, the page loaded
//! in a real headless browser (its scripts run, its plots drawn, no script
//! errors, its numbers equal to `/metrics` at the same moment), the preview
//! of a known frame equal to the CPU chain's output at the preview's
//! scaling, and the HTML report of a short `bench` checked the same way.
//! Viewers and a flooding client cost no frame; an idle client is cut off.
//! The screenshots go to target/screenshots (FRAMELOOP_SCREENSHOTS).

mod service_support;
mod web_support;

use frameloop::ops::{CpuChain, OpSpec};
use frameloop::sender::Pattern;
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};
use web_support::{
    PATIENCE, Run, attr, body_tag, decode_png, dump_dom, expected_preview, frameloop, get, get_json,
    metric_cells, screenshot, screenshot_dir, tag_with_id,
};

/// Row length of the test frames: not a multiple of any block or tile size.
const WIDTH: usize = 97;
const ROWS: usize = 70;
const FRAME_BYTES: usize = WIDTH * ROWS;

/// One test at a time: they share two cores.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// A config: u8 samples through a Sobel `filter2d` over rows of [`WIDTH`],
/// the output ring on, the HTTP server on a free loopback port.
fn write_config(dir: &Path, extra_service: &str) -> String {
    let path = dir.join("run.toml");
    let text = format!(
        "backend = \"host\"\n[ring]\nslots = 64\nslot_bytes = 16384\n[loop]\n\
         data_not_ready_sleep_interval_us = 100\n[ingest]\nbind = \"127.0.0.1:0\"\nframe_timeout_ms = 1000\n\
         [output]\nenabled = true\nslots = 16\nsocket = \"{}\"\n\
         [service]\nmetrics_addr = \"127.0.0.1:0\"\npreview_interval_ms = 200\n{extra_service}\
         [[chain]]\nop = \"unpack\"\nformat = \"u8\"\n\
         [[chain]]\nop = \"filter2d\"\nwidth = {WIDTH}\nkernel = [1.0, 2.0, 1.0, 0.0, 0.0, 0.0, -1.0, -2.0, -1.0]\n",
        dir.join("output.sock").display()
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn send(to: &str, args: &[&str]) -> Child {
    let mut all =
        vec!["send", "--to", to, "--frame-bytes", "6790", "--packet-bytes", "1472", "--pacing", "sleep"];
    all.extend_from_slice(args);
    frameloop(&all).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
}

fn processed(addr: SocketAddr) -> u64 {
    get_json(addr, "/api/status").pointer("/frames/processed").and_then(Value::as_u64).unwrap()
}

fn wait_processed(addr: SocketAddr, n: u64) {
    let deadline = Instant::now() + PATIENCE;
    while processed(addr) < n {
        assert!(Instant::now() < deadline, "fewer than {n} frames processed: {}", processed(addr));
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn number(text: &str) -> f64 {
    text.parse().unwrap_or_else(|_| panic!("{text:?} is not a number"))
}

#[test]
fn the_page_shows_the_running_appliance_as_metrics_does_and_previews_the_frame_the_cpu_chain_computes() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let chain = frameloop::config::load(Path::new(&config)).unwrap().chain;
    assert!(matches!(chain[1], OpSpec::Filter2d { .. }));
    let run = Run::start(&config, &[]);
    let http = run.http;

    // The page while the stream runs: it updates and draws.
    let mut sender = send(&run.ingest, &["--rate", "50", "--count", "400"]);
    wait_processed(http, 20);
    let dom = dump_dom(&format!("http://{http}/"));
    let body = body_tag(&dom);
    assert_eq!(attr(body, "data-errors").as_deref(), Some("0"), "script errors: {dom}");
    assert_eq!(attr(body, "data-fetch-errors").as_deref(), Some("0"), "{dom}");
    assert_eq!(attr(body, "data-state").as_deref(), Some("ready"), "{body}");
    assert!(number(&attr(body, "data-updates").unwrap()) >= 2.0, "the page updates itself: {body}");
    assert_eq!(attr(tag_with_id(&dom, "state"), "class").as_deref(), Some("state"), "running, not down");
    let rate = (0..50)
        .find_map(|_| {
            let rate = get_json(http, "/api/status")["frames_per_s"].as_f64().filter(|&r| r > 0.0);
            if rate.is_none() {
                std::thread::sleep(Duration::from_millis(100));
            }
            rate
        })
        .expect("a frame rate while the stream runs");
    assert!((20.0..=80.0).contains(&rate), "{rate} frames/s at 50/s");
    let shot = screenshot_dir().join("live-view.png");
    screenshot(&format!("http://{http}/"), &shot, 1280, 2500);
    assert!(sender.wait().unwrap().success());
    wait_processed(http, 400);

    // At rest (nothing moves), the page's numbers and /metrics agree.
    std::thread::sleep(Duration::from_millis(1200));
    let dom = dump_dom(&format!("http://{http}/"));
    let (status, _, text) = service_support::http_get(http, "/metrics").unwrap();
    assert_eq!(status, 200);
    let exp = service_support::parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let body = body_tag(&dom);
    assert_eq!(attr(body, "data-errors").as_deref(), Some("0"), "script errors: {dom}");
    for id in ["plot-latency", "plot-history"] {
        let drawn = attr(tag_with_id(&dom, id), "data-drawn").unwrap_or_default();
        assert!(number(&drawn) >= 2.0, "{id} drew {drawn} lines");
    }
    assert!(dom.contains("end_to_end") && dom.contains("<polyline"), "the plots are inline SVG");
    let cells = metric_cells(&dom);
    let metric = |name: &str, labels: &[(&str, &str)]| {
        exp.value(name, labels).unwrap_or_else(|| panic!("/metrics has no {name}{labels:?}"))
    };
    let mut compared = 0;
    for (key, value) in &cells {
        let want = if let Some(outcome) = key.strip_prefix("frames.") {
            metric("frameloop_frames_total", &[("outcome", outcome)])
        } else if let Some(reason) = key.strip_prefix("drops.") {
            metric("frameloop_drops_total", &[("reason", reason)])
        } else if let Some(outcome) = key.strip_prefix("reloads.") {
            metric("frameloop_reloads_total", &[("outcome", outcome)])
        } else if key == "param_generation" {
            metric("frameloop_param_generation", &[])
        } else if key == "ring_overruns" {
            metric("frameloop_ring_overruns_total", &[])
        } else if key == "outputs.written" {
            metric("frameloop_outputs_written_total", &[])
        } else if key == "outputs.consumers" {
            metric("frameloop_output_consumers", &[])
        } else if let Some(rest) = key.strip_prefix("latency.") {
            let (segment, what) = rest.split_once('.').unwrap();
            if what == "count" {
                metric("frameloop_latency_seconds_count", &[("segment", segment)])
            } else {
                let q = if what == "1" { "1" } else { what };
                let seconds = metric("frameloop_latency_seconds", &[("segment", segment), ("quantile", q)]);
                let shown = number(value);
                assert!(
                    (shown - seconds * 1e6).abs() <= 0.051 + 5e-4 * shown,
                    "{key}: page {shown} µs, /metrics {seconds} s"
                );
                compared += 1;
                continue;
            }
        } else {
            continue;
        };
        assert_eq!(number(value), want, "{key}: the page shows {value}, /metrics {want}");
        compared += 1;
    }
    assert_eq!(cells.get("frames.processed").map(String::as_str), Some("400"), "{cells:?}");
    assert!(compared >= 20, "only {compared} numbers compared: {cells:?}");

    // The preview: the newest output, an image of the frame the CPU chain computes.
    let preview_box = tag_with_id(&dom, "preview");
    assert_eq!(
        attr(preview_box, "data-drawn").as_deref(),
        Some("1"),
        "the preview image loaded: {preview_box}"
    );
    let info = get_json(http, "/api/preview");
    assert_eq!(info["available"], true, "{info}");
    assert_eq!(info["kind"], "image");
    let url = info["url"].as_str().unwrap();
    let (status, head, png) = get(http, url);
    assert_eq!(status, 200, "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: image/png"), "{head}");
    let seq_header = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase().strip_prefix("x-frameloop-output-sequence: ").map(str::to_string)
        })
        .expect("the sequence header");
    assert_eq!(seq_header, info["sequence"].to_string());
    let frame_seq = info["frame_seq"].as_u64().unwrap();
    assert_eq!(frame_seq, 399, "the newest frame");
    let mut cpu = CpuChain::new(&chain, FRAME_BYTES).unwrap();
    let out = cpu.run(&Pattern::Counter.frame(0, frame_seq, FRAME_BYTES));
    let samples = cpu.output(&out).to_vec();
    assert_eq!(samples.len(), FRAME_BYTES);
    let (w, h, want) = expected_preview(&samples, WIDTH, 512);
    let (got_w, got_h, got) = decode_png(&png);
    assert_eq!((got_w as usize, got_h as usize), (w, h));
    assert!(
        want.iter().any(|&p| p > 0) && want.iter().any(|&p| p < 255),
        "a flat image would match anything"
    );
    assert_eq!(got, want, "the preview is the CPU chain's output at the preview's scaling");
    let scaling = &info["scaling"];
    assert_eq!((scaling["frame_width"].as_u64(), scaling["stride"].as_u64()), (Some(WIDTH as u64), Some(1)));

    // The API documents itself; unknown paths are 404.
    let index = get_json(http, "/api");
    assert!(index["endpoints"].as_array().unwrap().iter().any(|e| e["path"] == "/api/latency"));
    assert_eq!(get(http, "/nothing").0, 404);

    let report = run.stop();
    assert_eq!(report.pointer("/latency/frames/processed").and_then(Value::as_u64), Some(400));
}

#[test]
fn the_html_report_of_a_short_bench_shows_its_numbers_and_plots() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let path = dir.path().join("bench.html");
    let out = frameloop(&[
        "bench",
        "--backend",
        "host",
        "--config",
        &config,
        "--duration",
        "1",
        "--rate",
        "200",
        "--frame-bytes",
        "6790",
        "--packet-bytes",
        "1472",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "bench failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let html = std::fs::read_to_string(&path).unwrap();
    assert!(!html.contains(" src=") && !html.contains("<link"), "the report fetches nothing");
    assert!(html.contains("[[chain]]") && html.contains("filter2d"), "the config is in the report");
    let url = format!("file://{}", path.display());
    let dom = dump_dom(&url);
    let body = body_tag(&dom);
    assert_eq!(attr(body, "data-state").as_deref(), Some("ready"), "the report's script ran: {body}");
    assert_eq!(attr(body, "data-plots").as_deref(), Some("1"), "{body}");
    assert!(number(&attr(body, "data-drawn").unwrap()) >= 3.0, "{body}");
    for row in ["host", "kernel", "CPU", "backend"] {
        assert!(dom.contains(&format!("<th>{row}</th>")), "the machine's {row}");
    }
    let cells = metric_cells(&dom);
    let segments = json.pointer("/latency/segments").and_then(Value::as_array).unwrap();
    let mut compared = 0;
    for s in segments.iter().filter(|s| s["count"].as_u64() > Some(0)) {
        let name = s["segment"].as_str().unwrap();
        for what in ["count", "p50_us", "p90_us", "p99_us", "p99_9_us", "max_us", "mean_us"] {
            let shown = number(&cells[&format!("latency.{name}.{what}")]);
            let want = s[what].as_f64().unwrap();
            assert!((shown - want).abs() <= 0.0051, "{name} {what}: report {shown}, JSON {want}");
            compared += 1;
        }
    }
    assert!(compared >= 21, "{compared} numbers compared");
    let sent = json.pointer("/sender/frames").and_then(Value::as_u64).expect("the sender's count");
    assert!(sent >= 150, "{sent} frames sent in a second at 200/s");
    assert_eq!(json.pointer("/latency/frames/processed").and_then(Value::as_u64), Some(sent), "{json:#}");
    screenshot(&url, &screenshot_dir().join("bench-report.png"), 1100, 1400);
}

/// Frames' end-to-end latency (ns) from a frame log, by sender time.
fn end_to_end_by_time(log: &Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<u64> = l.split(',').map(|c| c.parse().unwrap_or(0)).collect();
            let (sent, seen) = (cols[6], cols[12]);
            (sent > 0 && seen >= sent).then_some((sent, seen - sent))
        })
        .collect()
}

fn p99(mut values: Vec<u64>) -> u64 {
    assert!(values.len() >= 200, "only {} frames in a phase", values.len());
    values.sort_unstable();
    values[(values.len() * 99).div_ceil(100) - 1]
}

fn unix_ns() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64
}

#[test]
fn fifty_viewers_and_a_flooding_client_cost_no_frame_and_an_idle_client_is_cut_off() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "http_timeout_ms = 1000\n");
    let log = dir.path().join("frames.csv");
    let run = Run::start(&config, &["--frame-log", log.to_str().unwrap()]);
    let http = run.http;
    const RATE: u64 = 200;
    const SECONDS: u64 = 15;
    let started = unix_ns();
    let mut sender =
        send(&run.ingest, &["--rate", &RATE.to_string(), "--count", &(RATE * SECONDS).to_string()]);
    let at = move |s: f64| started + (s * 1e9) as u64;
    let sleep_until = |t: u64| {
        let now = unix_ns();
        if t > now {
            std::thread::sleep(Duration::from_nanos(t - now));
        }
    };

    // 0.5..4.5 s: nobody watches. 4.5..8.5 s: fifty viewers, each reloading
    // the page and fetching a preview once a second. 8.5..12.5 s: nobody.
    sleep_until(at(4.5));
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, limited, failed) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let viewers: Vec<_> = (0..50)
        .map(|i| {
            let (stop, ok, limited, failed) =
                (Arc::clone(&stop), Arc::clone(&ok), Arc::clone(&limited), Arc::clone(&failed));
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(i * 20));
                while !stop.load(Ordering::Relaxed) {
                    let second = Instant::now();
                    for path in ["/", "/api/preview.png"] {
                        match get(http, path).0 {
                            200 => ok.fetch_add(1, Ordering::Relaxed),
                            429 => limited.fetch_add(1, Ordering::Relaxed),
                            _ => failed.fetch_add(1, Ordering::Relaxed),
                        };
                    }
                    std::thread::sleep(Duration::from_secs(1).saturating_sub(second.elapsed()));
                }
            })
        })
        .collect();
    sleep_until(at(8.5));
    stop.store(true, Ordering::Relaxed);
    for v in viewers {
        v.join().unwrap();
    }
    let viewed = ok.load(Ordering::Relaxed);
    assert!(viewed >= 50 * 2 * 3, "the viewers were served: {viewed} answers");
    assert_eq!(
        (limited.load(Ordering::Relaxed), failed.load(Ordering::Relaxed)),
        (0, 0),
        "fifty viewers fit the limits"
    );

    // An idle client (a connection that sends nothing, and one that stops
    // half-way through its request) is cut off after the timeout.
    let mut idle = TcpStream::connect(http).unwrap();
    let mut half = TcpStream::connect(http).unwrap();
    half.write_all(b"GET /api/status HTTP/1.1\r\nHost: x\r\n").unwrap();
    let opened = Instant::now();
    for s in [&mut idle, &mut half] {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        let _ = s.read_to_end(&mut rest);
    }
    let waited = opened.elapsed();
    assert!(waited < Duration::from_secs(4), "idle clients were cut off after {waited:?} (timeout 1 s)");

    // 12.5..14.5 s: one client floods as fast as it can.
    sleep_until(at(12.5));
    let flood_ok = Arc::new(AtomicU64::new(0));
    let flood_limited = Arc::new(AtomicU64::new(0));
    let flooders: Vec<_> = (0..4)
        .map(|_| {
            let (ok, limited) = (Arc::clone(&flood_ok), Arc::clone(&flood_limited));
            std::thread::spawn(move || {
                while unix_ns() < at(14.5) {
                    match get(http, "/api/status").0 {
                        200 => ok.fetch_add(1, Ordering::Relaxed),
                        429 => limited.fetch_add(1, Ordering::Relaxed),
                        _ => 0,
                    };
                }
            })
        })
        .collect();
    for f in flooders {
        f.join().unwrap();
    }
    let (flood_ok, flood_limited) = (flood_ok.load(Ordering::Relaxed), flood_limited.load(Ordering::Relaxed));
    assert!(flood_limited > 0, "the flood was limited ({flood_ok} answered, none refused)");
    assert!(flood_ok <= 2 * 500 + 500, "at most the rate (500/s) and its burst were answered: {flood_ok}");

    assert!(sender.wait().unwrap().success());
    wait_processed(http, RATE * SECONDS);
    let report = run.stop();
    let frames = report.pointer("/latency/frames").unwrap();
    assert_eq!(frames["processed"].as_u64(), Some(RATE * SECONDS), "no frame lost: {frames}");
    assert_eq!((frames["incomplete"].as_u64(), frames["skipped"].as_u64()), (Some(0), Some(0)), "{frames}");

    let frames = end_to_end_by_time(&log);
    let phase = |from: f64, to: f64| {
        p99(frames.iter().filter(|(t, _)| (at(from)..at(to)).contains(t)).map(|&(_, ns)| ns).collect())
    };
    let (before, watched, after) = (phase(0.5, 4.5), phase(4.5, 8.5), phase(8.5, 12.5));
    let spread = before.abs_diff(after);
    // The run-to-run spread, with a floor of 0.8 times the quiet p99: on a
    // loaded two-core machine two quiet phases can come out alike by chance,
    // and the p99 of 800 frames is the eighth slowest (a valid run moved it
    // 1.57-fold with nothing else running). The server at normal priority
    // moved it 2.3-fold on this machine, which still fails.
    let allowed = before.max(after) + spread.max(before.max(after) * 4 / 5);
    eprintln!(
        "end-to-end p99: {before} ns quiet, {watched} ns watched, {after} ns quiet; allowed {allowed} ns"
    );
    assert!(watched <= allowed, "viewers moved the p99 to {watched} ns (quiet: {before}, {after})");
}
