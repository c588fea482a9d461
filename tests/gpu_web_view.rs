//! The live view against the CUDA backend: `frameloop run --backend cuda`
//! with a 768 KiB image chain (u8 samples through `filter2d` over rows of
//! 1000, not a multiple of any block size), its output ring in device
//! memory (poisoned with NaN at creation) and fresh random frames; the page
//! loads in headless Chromium without script errors with its plots and
//! preview drawn, and the preview, copied off the device by the server's
//! own stream, equals the CPU chain's output at the preview's scaling
//! (stride 2). Needs a GPU:
//! `cargo test --test gpu_web_view -- --include-ignored`.

mod web_support;

use frameloop::ops::CpuChain;
use frameloop::sender::Pattern;
use serde_json::Value;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use web_support::{
    PATIENCE, Run, attr, body_tag, decode_png, dump_dom, expected_preview, frameloop, get, get_json,
    tag_with_id,
};

const WIDTH: usize = 1000;
const FRAME_BYTES: usize = 768 * 1024;
const FRAMES: u64 = 40;

fn write_config(dir: &Path) -> String {
    let path = dir.join("run.toml");
    let text = format!(
        "backend = \"cuda\"\n[ring]\nslots = 16\nslot_bytes = {FRAME_BYTES}\n\
         [ingest]\nbind = \"127.0.0.1:0\"\nframe_timeout_ms = 1000\n\
         [output]\nenabled = true\nslots = 8\nsocket = \"{}\"\n\
         [service]\nmetrics_addr = \"127.0.0.1:0\"\npreview_interval_ms = 100\n\
         [[chain]]\nop = \"unpack\"\nformat = \"u8\"\nscale = 0.5\noffset = -3.0\n\
         [[chain]]\nop = \"filter2d\"\nwidth = {WIDTH}\nkernel = [0.0, -1.0, 0.0, -1.0, 5.0, -1.0, 0.0, -1.0, 0.0]\n",
        dir.join("output.sock").display()
    );
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

#[test]
#[ignore = "needs a GPU"]
fn the_page_against_the_cuda_backend_previews_what_the_cpu_chain_computes() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let chain = frameloop::config::load(Path::new(&config)).unwrap().chain;
    let run = Run::start(&config, &["--backend", "cuda"]);
    let http = run.http;
    let status = get_json(http, "/api/status");
    assert_eq!(status["backend"], "cuda", "{status}");

    // Before any frame: the poisoned ring gives no preview, and says why.
    let empty = get_json(http, "/api/preview");
    assert_eq!(empty["available"], false, "{empty}");

    let sent = frameloop(&[
        "send",
        "--to",
        &run.ingest,
        "--rate",
        "50",
        "--count",
        &FRAMES.to_string(),
        "--frame-bytes",
        &FRAME_BYTES.to_string(),
        "--packet-bytes",
        "8972",
        "--pattern",
        "random",
        "--pacing",
        "sleep",
    ])
    .stdout(Stdio::null())
    .status()
    .unwrap();
    assert!(sent.success());
    let deadline = Instant::now() + PATIENCE;
    while get_json(http, "/api/status").pointer("/frames/processed").and_then(Value::as_u64) < Some(FRAMES) {
        assert!(Instant::now() < deadline, "the frames were not processed");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(300));

    // The page in a browser where the GPU machine has one (CI renders it on
    // the host backend in tests/web_view.rs); the preview below is checked
    // over the API either way.
    if web_support::find_chromium().is_some() {
        let dom = dump_dom(&format!("http://{http}/"));
        let body = body_tag(&dom);
        assert_eq!(attr(body, "data-errors").as_deref(), Some("0"), "script errors: {dom}");
        assert_eq!(attr(body, "data-state").as_deref(), Some("ready"), "{body}");
        assert!(attr(tag_with_id(&dom, "plot-latency"), "data-drawn").is_some_and(|d| d != "0"));
        assert_eq!(
            attr(tag_with_id(&dom, "preview"), "data-drawn").as_deref(),
            Some("1"),
            "the preview image loaded"
        );
    } else {
        eprintln!("no chromium here: the page's rendering is left to tests/web_view.rs");
        let (code, _, page) = get(http, "/");
        assert_eq!(code, 200);
        assert!(String::from_utf8_lossy(&page).contains("id=\"preview\""), "the page has its preview");
    }

    let info = get_json(http, "/api/preview");
    assert_eq!((info["available"].as_bool(), info["kind"].as_str()), (Some(true), Some("image")), "{info}");
    assert_eq!(info["scaling"]["stride"].as_u64(), Some(2), "1000 samples a row onto at most 512 pixels");
    let (code, head, png) = get(http, info["url"].as_str().unwrap());
    assert_eq!(code, 200, "{head}");
    assert!(head.contains(&format!("X-Frameloop-Output-Sequence: {}", info["sequence"])), "{head}");
    let frame_seq = info["frame_seq"].as_u64().unwrap();
    assert_eq!(frame_seq, FRAMES - 1, "the newest frame");
    let mut cpu = CpuChain::new(&chain, FRAME_BYTES).unwrap();
    let out = cpu.run(&Pattern::Random.frame(0, frame_seq, FRAME_BYTES));
    let samples = cpu.output(&out).to_vec();
    assert!(samples.iter().all(|v| v.is_finite()));
    let (w, h, want) = expected_preview(&samples, WIDTH, 512);
    let (got_w, got_h, got) = decode_png(&png);
    assert_eq!((got_w as usize, got_h as usize), (w, h));
    assert_eq!((w, h), (500, (FRAME_BYTES / WIDTH).div_ceil(2)));
    // The GPU's float arithmetic may round differently from the CPU's: a
    // pixel may be off by one level, never more.
    let off: Vec<usize> = (0..want.len()).filter(|&i| got[i].abs_diff(want[i]) > 1).collect();
    assert!(off.is_empty(), "{} pixels differ by more than 1, first at {:?}", off.len(), off.first());
    let exact = (0..want.len()).filter(|&i| got[i] == want[i]).count();
    assert!(exact * 100 >= want.len() * 99, "{exact} of {} pixels exact", want.len());
    let report = run.stop();
    assert_eq!(report.pointer("/latency/frames/processed").and_then(Value::as_u64), Some(FRAMES));
}

#[test]
#[ignore = "needs a GPU"]
fn the_compare_report_draws_every_mode_and_the_floors_on_one_plot() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("compare.html");
    let out = frameloop(&[
        "bench",
        "--backend",
        "cuda",
        "--compare",
        "--frames",
        "2000",
        "--json",
        "--report",
        path.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert!(out.status.success(), "bench --compare failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let json: Value = serde_json::from_slice(&out.stdout).unwrap();
    let html = std::fs::read_to_string(&path).unwrap();
    // Rendered by a browser where there is one; otherwise the file as written
    // (its table and plots are static HTML and SVG).
    let dom = if web_support::find_chromium().is_some() {
        let dom = dump_dom(&format!("file://{}", path.display()));
        assert_eq!(attr(body_tag(&dom), "data-state").as_deref(), Some("ready"), "{}", body_tag(&dom));
        dom
    } else {
        eprintln!("no chromium here: checking the report's HTML as written");
        html.clone()
    };
    let modes = json["modes"].as_array().unwrap();
    assert!(modes.len() >= 3, "{json:#}");
    for m in modes {
        let name = m["mode"].as_str().unwrap();
        assert!(html.contains(&web_support_escape(name)), "mode {name} missing from the report");
        let shown = web_support::metric_cells(&dom)[&format!("mode.{name}.p99_us")].parse::<f64>().unwrap();
        assert!((shown - m["p99_us"].as_f64().unwrap()).abs() <= 0.0051, "{name}: {shown}");
    }
    assert!(html.contains("floor: persistent-kernel round trip p50"), "the floors are on the plot");
    // One line per mode and one per floor, each with its legend entry.
    let plot = tag_with_id(&dom, "plot-0");
    assert!(!plot.is_empty());
    assert!(dom.matches("<polyline").count() > modes.len(), "every mode and a floor drawn");
}

fn web_support_escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}
