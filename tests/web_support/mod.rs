//! Shared by the live-view tests: a headless Chromium (Debian's `chromium`,
//! installed by scripts/setup.sh) that loads a page and returns its DOM
//! after the page's scripts ran, or a screenshot; and readers of what the
//! pages write into their DOM (`data-*` attributes, `data-metric` cells).
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Longest a browser run may take before it is killed.
const BROWSER_PATIENCE: Duration = Duration::from_secs(60);

/// The browser: `FRAMELOOP_CHROMIUM`, else `chromium` on the PATH.
pub fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("FRAMELOOP_CHROMIUM") {
        return PathBuf::from(p);
    }
    for dir in std::env::var("PATH").unwrap_or_default().split(':') {
        for name in ["chromium", "chromium-browser"] {
            let p = Path::new(dir).join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!("no chromium on the PATH: install it (scripts/setup.sh does: apt-get install chromium)");
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
