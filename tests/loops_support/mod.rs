//! Shared by the several-loops tests: a two-loop config, native frames sent
//! to a loop's port, and a loop set that collects each loop's results.

#![allow(dead_code)] // each test binary uses its own subset

use frameloop::app::{LoopSet, plan_loops};
use frameloop::clock;
use frameloop::config::Config;
use frameloop::ring::ResultRecord;
use frameloop::sender::FrameGeometry;
use frameloop::topology::Topology;
use frameloop::wire::native::{self, HEADER_LEN};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

pub const FRAME_LEN: usize = 1000;
pub const STRIDE: usize = 100;
pub const FRAMES: u64 = 40;

/// Two loops: `cam0` runs the top-level chain (u8 samples, stats,
/// threshold) on stream 1, `cam1` its own (u16 samples, stats) on stream 2.
pub const TWO_LOOPS: &str = r#"
backend = "host"
[ring]
slot_bytes = 4096
[ingest]
bind = "127.0.0.1:0"
frame_timeout_ms = 1000
[[chain]]
op = "unpack"
format = "u8"
[[chain]]
op = "stats"
[[chain]]
op = "threshold"
level = 150.0

[[loop]]
name = "cam0"
streams = [1]
data_not_ready_sleep_interval_us = 100

[[loop]]
name = "cam1"
streams = [2]
data_not_ready_sleep_interval_us = 100
[[loop.chain]]
op = "unpack"
format = "u16"
[[loop.chain]]
op = "stats"
"#;

pub fn no_machine() -> Topology {
    Topology { gpus: Vec::new(), nics: Vec::new(), numa_nodes: Vec::new() }
}

pub fn payload(stream: u32, seq: u64) -> Vec<u8> {
    (0..FRAME_LEN).map(|i| 1 + ((i * 7 + seq as usize * 13 + stream as usize * 29) % 251) as u8).collect()
}

/// Sends frame (`stream`, `seq`) to `to` as native datagrams.
pub fn send_frame(socket: &UdpSocket, to: SocketAddr, stream: u32, seq: u64) {
    let geometry = FrameGeometry::new(FRAME_LEN as u64, STRIDE + HEADER_LEN).unwrap();
    let data = payload(stream, seq);
    for index in 0..(FRAME_LEN / STRIDE) as u32 {
        let (offset, len) = geometry.span(index);
        let header = geometry.header(stream, seq, index, clock::realtime_ns());
        socket
            .send_to(&native::encode(&header, &data[offset as usize..(offset + len) as usize]), to)
            .unwrap();
    }
}

pub type Seen = Arc<Mutex<BTreeMap<String, Vec<ResultRecord>>>>;

/// Starts every loop of `cfg`, each collecting its results under its name;
/// `poisoned` names a loop whose result callback panics (its result thread dies).
pub fn start(cfg: &Config, poisoned: Option<&'static str>) -> (LoopSet, Seen) {
    let cuda = cfg.backend == frameloop::config::BackendChoice::Cuda;
    let machine = if cuda { Topology::read(std::path::Path::new("/sys")).unwrap() } else { no_machine() };
    let plans = plan_loops(cfg, cuda, &machine, &[]).unwrap();
    let seen: Seen = Arc::default();
    let set = LoopSet::start(cfg, plans, None, |name| {
        let (seen, name) = (Arc::clone(&seen), name.to_string());
        let poison = poisoned == Some(name.as_str());
        Some(Box::new(move |r: &ResultRecord| {
            assert!(!poison, "test-requested death of {name}'s result thread");
            seen.lock().unwrap().entry(name.clone()).or_default().push(*r);
        }))
    })
    .expect("both loops start");
    (set, seen)
}

pub fn count(seen: &Seen, name: &str) -> usize {
    seen.lock().unwrap().get(name).map_or(0, Vec::len)
}

pub fn addr(set: &LoopSet, name: &str) -> SocketAddr {
    set.appliance(name).unwrap().local_addr()
}
