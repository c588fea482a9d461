//! Shared by the service tests: a Prometheus text-format parser that checks
//! what a scraper checks, a fake systemd notification socket, and a minimal
//! HTTP GET.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed exposition: each family's type and help, and every sample.
#[derive(Debug, Default)]
pub struct Exposition {
    pub types: BTreeMap<String, String>,
    pub helps: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the one sample `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let found: Vec<&Sample> = self
            .samples
            .iter()
            .filter(|s| {
                s.name == name && labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect();
        match found.as_slice() {
            [one] => Some(one.value),
            _ => None,
        }
    }

    /// Every sample called `name`.
    pub fn all(&self, name: &str) -> Vec<&Sample> {
        self.samples.iter().filter(|s| s.name == name).collect()
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Parses `{k="v",...}` starting after `{`; returns the labels and the rest
/// after `}`.
fn parse_labels(mut rest: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let (key, after) = rest.split_once("=\"").ok_or_else(|| format!("label without =\" in {rest:?}"))?;
        if !valid_name(key) || key.starts_with("__") {
            return Err(format!("bad label name {key:?}"));
        }
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next() {
                None => return Err("unterminated label value".into()),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, 'n')) => value.push('\n'),
                    other => return Err(format!("bad escape {other:?} in label {key}")),
                },
                Some((_, '\n')) => return Err("raw line feed in a label value".into()),
                Some((_, c)) => value.push(c),
            }
        };
        if labels.insert(key.to_string(), value).is_some() {
            return Err(format!("label {key} repeated"));
        }
        rest = &after[end + 1..];
        rest = rest.strip_prefix(',').unwrap_or(rest);
    }
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        t => t.parse().map_err(|_| format!("bad value {t:?}")),
    }
}

/// The family a sample belongs to: its own name, or for summaries and
/// histograms the name without `_sum`/`_count`/`_bucket`.
fn family_of<'a>(name: &'a str, types: &BTreeMap<String, String>) -> Option<&'a str> {
    if types.contains_key(name) {
        return Some(name);
    }
    for suffix in ["_sum", "_count", "_bucket"] {
        if let Some(base) = name.strip_suffix(suffix)
            && matches!(types.get(base).map(String::as_str), Some("summary" | "histogram"))
        {
            return Some(base);
        }
    }
    None
}

/// Parses the text exposition format (0.0.4) strictly: every sample belongs
/// to a family whose `# TYPE` came first, each family is declared once,
/// names and labels are well formed, values are numbers, the text ends with
/// a line feed.
pub fn parse_exposition(text: &str) -> Result<Exposition, String> {
    if !text.ends_with('\n') {
        return Err("the exposition must end with a line feed".into());
    }
    let mut exp = Exposition::default();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("TYPE"), Some(name), Some(kind)) => {
                    if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                        return Err(at(format!("unknown type {kind}")));
                    }
                    if exp.samples.iter().any(|s| family_of(&s.name, &exp.types) == Some(name)) {
                        return Err(at("TYPE after the family's samples".into()));
                    }
                    if exp.types.insert(name.to_string(), kind.to_string()).is_some() {
                        return Err(at("family declared twice".into()));
                    }
                }
                (Some("HELP"), Some(name), help) => {
                    exp.helps.insert(name.to_string(), help.unwrap_or("").to_string());
                }
                _ => {}
            }
            continue;
        }
        let name_end = line.find(['{', ' ']).ok_or_else(|| at("no value".into()))?;
        let name = &line[..name_end];
        if !valid_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = match line[name_end..].strip_prefix('{') {
            Some(inner) => parse_labels(inner).map_err(at)?,
            None => (BTreeMap::new(), &line[name_end..]),
        };
        let mut fields = rest.split_whitespace();
        let value = parse_value(fields.next().ok_or_else(|| at("no value".into()))?).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<i64>().map_err(|_| at("bad timestamp".into()))?;
        }
        let family = family_of(name, &exp.types).ok_or_else(|| at("sample before its # TYPE".into()))?;
        match exp.types[family].as_str() {
            "counter" if value < 0.0 => return Err(at("negative counter".into())),
            "summary" if name == family && !labels.contains_key("quantile") => {
                return Err(at("summary sample without quantile".into()));
            }
            _ => {}
        }
        exp.samples.push(Sample { name: name.to_string(), labels, value });
    }
    Ok(exp)
}

/// `GET path` over HTTP/1.1; returns (status, headers, body).
pub fn http_get(addr: SocketAddr, path: &str) -> std::io::Result<(u16, String, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/plain\r\n\r\n")?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok((status, head.to_string(), body.to_string()))
}

/// One notification datagram and when it arrived.
pub type Message = (Instant, String);

/// A fake service manager socket: every datagram received, as text, in
/// arrival order, through a channel fed by a reader thread.
pub struct NotifySocket {
    pub path: PathBuf,
    messages: Receiver<Message>,
}

impl NotifySocket {
    pub fn bind(dir: &Path) -> Self {
        let path = dir.join("notify.sock");
        let sock = UnixDatagram::bind(&path).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = vec![0u8; 4096];
            while let Ok(n) = sock.recv(&mut buf) {
                let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                if tx.send((Instant::now(), text)).is_err() {
                    return;
                }
            }
        });
        Self { path, messages: rx }
    }

    /// The next message containing `line` (a whole `KEY=VALUE` line) within
    /// `timeout`; messages before it are returned too.
    pub fn wait_for(&self, line: &str, timeout: Duration) -> Result<Vec<Message>, Vec<Message>> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.messages.recv_timeout(left) {
                Ok(m) => {
                    let hit = m.1.lines().any(|l| l == line);
                    seen.push(m);
                    if hit {
                        return Ok(seen);
                    }
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => return Err(seen),
            }
        }
    }

    /// Every message received during `window`.
    pub fn collect(&self, window: Duration) -> Vec<Message> {
        let deadline = Instant::now() + window;
        let mut seen = Vec::new();
        while let Ok(m) = self.messages.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            seen.push(m);
        }
        seen
    }
}

/// Messages among `messages` that contain the line `line`.
pub fn count_line(messages: &[Message], line: &str) -> usize {
    messages.iter().filter(|(_, m)| m.lines().any(|l| l == line)).count()
}
