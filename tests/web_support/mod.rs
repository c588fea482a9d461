//! Shared by the live-view tests: a headless Chromium (Debian's `chromium`,
//! installed by scripts/setup.sh) that loads a page and returns its DOM
//! after the page's scripts ran, or a screenshot; and readers of what the
//! pages write into their DOM (`data-*` attributes, `data-metric` cells);
//! `frameloop run` with its addresses, plain GETs, and the preview's scaling
//! written independently of the server.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a test waits for the appliance.
pub const PATIENCE: Duration = Duration::from_secs(120);

/// Longest a browser run may take before it is killed.
const BROWSER_PATIENCE: Duration = Duration::from_secs(60);

/// The browser: `FRAMELOOP_CHROMIUM`, else `chromium` on the PATH.
pub fn chromium() -> PathBuf {
    find_chromium().unwrap_or_else(|| {
        panic!("no chromium on the PATH: install it (scripts/setup.sh does: apt-get install chromium)")
    })
}

/// The headless browser, if this machine has one (`FRAMELOOP_CHROMIUM`, or
/// `chromium` / `chromium-browser` on the PATH).
pub fn find_chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FRAMELOOP_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        for name in ["chromium", "chromium-browser"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return Some(p);
            }
        }
    }
    None
}

/// Runs the browser headless on `url` with `extra` arguments and a fresh
/// profile, waiting up to [`BROWSER_PATIENCE`]; returns its stdout.
fn browse(url: &str, extra: &[String]) -> String {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(extra)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chromium starts");
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        let _ = std::io::Read::read_to_string(&mut stdout, &mut out);
        out
    });
    let deadline = Instant::now() + BROWSER_PATIENCE;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish {url} within {BROWSER_PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "chromium failed on {url}: {status}");
    reader.join().unwrap()
}

/// The DOM of `url` after its scripts ran for five seconds of virtual time.
pub fn dump_dom(url: &str) -> String {
    browse(url, &["--dump-dom".to_string()])
}

/// A screenshot of `url` (after its scripts ran) written to `path`.
pub fn screenshot(url: &str, path: &Path, width: u32, height: u32) {
    let _ = std::fs::remove_file(path);
    browse(url, &[format!("--window-size={width},{height}"), format!("--screenshot={}", path.display())]);
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("no screenshot at {}: {e}", path.display()));
    assert!(bytes.starts_with(b"\x89PNG"), "the screenshot is a PNG");
}

/// Where the tests keep their screenshots: `FRAMELOOP_SCREENSHOTS`, else
/// `target/screenshots`.
pub fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("FRAMELOOP_SCREENSHOTS")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots"), PathBuf::from);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The opening tag of the element with `id` (panics when there is none).
pub fn tag_with_id<'a>(dom: &'a str, id: &str) -> &'a str {
    let at = dom.find(&format!("id=\"{id}\"")).unwrap_or_else(|| panic!("no element with id {id}"));
    let start = dom[..at].rfind('<').unwrap();
    let end = at + dom[at..].find('>').unwrap();
    &dom[start..=end]
}

/// The value of attribute `name` in an opening `tag`.
pub fn attr(tag: &str, name: &str) -> Option<String> {
    let key = format!(" {name}=\"");
    let at = tag.find(&key)? + key.len();
    Some(tag[at..].split('"').next()?.to_string())
}

/// The `<body>` tag.
pub fn body_tag(dom: &str) -> &str {
    let start = dom.find("<body").expect("a body");
    &dom[start..start + dom[start..].find('>').unwrap() + 1]
}

/// Every `data-metric="KEY">VALUE<` cell of a page.
pub fn metric_cells(dom: &str) -> BTreeMap<String, String> {
    let mut cells = BTreeMap::new();
    for part in dom.split("data-metric=\"").skip(1) {
        let (key, rest) = part.split_once('"').unwrap();
        let value = rest.split_once('>').unwrap().1.split('<').next().unwrap();
        cells.insert(key.to_string(), value.to_string());
    }
    cells
}

pub fn frameloop(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_frameloop"));
    cmd.args(args).env("NO_COLOR", "1").env_remove("NOTIFY_SOCKET").stdin(Stdio::null());
    cmd
}

/// `frameloop run` and the addresses it printed.
pub struct Run {
    pub child: Child,
    pub ingest: String,
    pub http: SocketAddr,
    stdout: mpsc::Receiver<String>,
}

impl Run {
    pub fn start(config: &str, extra: &[&str]) -> Self {
        let mut args = vec!["run", "--config", config, "--json"];
        args.extend_from_slice(extra);
        let mut child = frameloop(&args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let forward = |pipe: Box<dyn Read + Send>| {
            let (tx, rx) = mpsc::channel();
            std::thread::spawn(move || {
                for line in BufReader::new(pipe).lines().map_while(Result::ok) {
                    let _ = tx.send(line);
                }
            });
            rx
        };
        let stderr = forward(Box::new(child.stderr.take().unwrap()));
        let stdout = forward(Box::new(child.stdout.take().unwrap()));
        let (mut ingest, mut http) = (None, None);
        let deadline = Instant::now() + PATIENCE;
        while ingest.is_none() || http.is_none() {
            let line = stderr
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|e| panic!("frameloop run printed no addresses ({e})"));
            if let Some(rest) = line.split("listening on ").nth(1) {
                ingest.get_or_insert(rest.split_whitespace().next().unwrap().to_string());
            }
            if let Some(rest) = line.split("live view at http://").nth(1) {
                http = Some(rest.split('/').next().unwrap().parse().unwrap());
            }
        }
        std::thread::spawn(move || while stderr.recv().is_ok() {});
        Self { child, ingest: ingest.unwrap(), http: http.unwrap(), stdout }
    }

    /// SIGINT, then the JSON report it printed.
    pub fn stop(mut self) -> Value {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), nix::sys::signal::SIGINT)
            .unwrap();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "frameloop run failed: {status}");
        let mut text = String::new();
        while let Ok(line) = self.stdout.recv_timeout(Duration::from_secs(5)) {
            text.push_str(&line);
            text.push('\n');
        }
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One GET; (status, head, body bytes).
pub fn get(addr: SocketAddr, path: &str) -> (u16, String, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(raw.len());
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let body = raw.get(split + 4..).unwrap_or_default().to_vec();
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head, body)
}

pub fn get_json(addr: SocketAddr, path: &str) -> Value {
    let (status, head, body) = get(addr, path);
    assert_eq!(status, 200, "{path}: {head}");
    serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The preview of `samples` the way docs/live-view.md defines it, written
/// here independently of the server: every `stride`-th row and column,
/// min..max of the kept samples onto 0..=255.
pub fn expected_preview(samples: &[f32], width: usize, max_side: usize) -> (usize, usize, Vec<u8>) {
    let rows = samples.len() / width;
    let stride = width.max(rows).div_ceil(max_side);
    let (w, h) = (width.div_ceil(stride), rows.div_ceil(stride));
    let kept: Vec<f32> = (0..h)
        .flat_map(|r| (0..w).map(move |c| (r, c)))
        .map(|(r, c)| samples[r * stride * width + c * stride])
        .collect();
    let min = kept.iter().copied().fold(f32::INFINITY, f32::min);
    let max = kept.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let span = f64::from(max) - f64::from(min);
    let pixels = kept
        .iter()
        .map(|&v| if span > 0.0 { ((f64::from(v) - f64::from(min)) / span * 255.0).round() as u8 } else { 0 })
        .collect();
    (w, h, pixels)
}

pub fn decode_png(bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(bytes.to_vec()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.color_type, info.bit_depth), (png::ColorType::Grayscale, png::BitDepth::Eight));
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}
