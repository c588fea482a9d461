//! Several resident loops on the host backend (`[[loop]]`): two loops fed
//! by two streams on two UDP ports, every result checked against the CPU
//! reference of its loop's own chain and seen only by that loop; a loop whose
//! result thread dies, or whose resident loop stops, is marked down while the
//! other keeps processing; two loops on ONE port, its one receiver routing
//! each loop its stream by id (a third stream counted and dropped), every
//! frame checked; and `frameloop run` over two loops, reporting each and
//! exiting 3 when one went down.

mod appliance_support;
mod loops_support;
mod service_support;

use appliance_support::{PATIENCE, check_result, one_at_a_time, reference_chain, wait_for};
use frameloop::config::loops::port_groups;
use frameloop::config::{Config, parse};
use frameloop::service::{MetricsBoard, MetricsServer};
use loops_support::{FRAMES, TWO_LOOPS, addr, count, payload, send_frame, start};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

#[test]
fn two_loops_each_process_their_own_stream_with_their_own_chain() {
    let _one = one_at_a_time();
    let cfg = parse(TWO_LOOPS).unwrap();
    let (set, seen) = start(&cfg, None);
    assert_eq!(set.names(), ["cam0", "cam1"]);
    let (a, b) = (addr(&set, "cam0"), addr(&set, "cam1"));
    assert_ne!(a.port(), b.port());
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..FRAMES {
        send_frame(&socket, a, 1, seq);
        send_frame(&socket, b, 2, seq);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "every frame's result",
        || (count(&seen, "cam0") >= FRAMES as usize && count(&seen, "cam1") >= FRAMES as usize).then_some(()),
        || {
            format!(
                "{:?}",
                seen.lock().unwrap().iter().map(|(k, v)| (k.clone(), v.len())).collect::<Vec<_>>()
            )
        },
    );
    // Scraped over HTTP, the text parses strictly, every sample labelled by its loop.
    let board = MetricsBoard::new();
    board.publish(set.metrics_snapshot());
    let server = MetricsServer::start("127.0.0.1:0".parse().unwrap(), board).unwrap();
    let (status, _, text) = service_support::http_get(server.local_addr(), "/metrics").unwrap();
    server.stop();
    assert_eq!(status, 200);
    let exposition = service_support::parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(exposition.samples.iter().all(|s| s.labels.contains_key("loop")), "{text}");
    let processed = |name: &str| {
        exposition
            .samples
            .iter()
            .find(|s| {
                s.name == "frameloop_frames_total"
                    && s.labels.get("loop").map(String::as_str) == Some(name)
                    && s.labels.get("outcome").map(String::as_str) == Some("processed")
            })
            .map(|s| s.value)
    };
    assert_eq!((processed("cam0"), processed("cam1")), (Some(FRAMES as f64), Some(FRAMES as f64)));
    assert!(text.contains("frameloop_loop_up{loop=\"cam0\",gpu=\"none\"} 1"), "{text}");
    assert!(text.contains("frameloop_stream_up{loop=\"cam1\",stream=\"2\"} 1"), "{text}");
    assert!(
        text.contains(&format!("frameloop_frames_total{{loop=\"cam1\",outcome=\"processed\"}} {FRAMES}")),
        "{text}"
    );
    let report = set.stop();
    assert!(report.down().is_empty(), "{:?}", report.down());
    let seen = seen.lock().unwrap();
    for (name, stream, chain) in [("cam0", 1, &cfg.loops[0].chain), ("cam1", 2, &cfg.loops[1].chain)] {
        let results = &seen[name];
        assert_eq!(results.len(), FRAMES as usize, "{name}: one result per frame");
        let mut seqs: Vec<u64> = results.iter().map(|r| r.frame_seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..FRAMES).collect::<Vec<_>>(), "{name}: every frame once");
        for r in results {
            assert_eq!(r.stream_id, stream, "{name} saw a frame of another loop's stream");
            check_result(r, &reference_chain(chain, &payload(stream, r.frame_seq)));
        }
    }
    assert_ne!(cfg.loops[0].chain, cfg.loops[1].chain, "the loops run different chains");
    let outcome = &report.loops[1];
    assert_eq!(outcome.report.as_ref().unwrap().loop_stats.frames_processed, FRAMES);
}

/// The two loops' config text on one free port of 127.0.0.1 (the same
/// `ingest.bind`), and the port.
fn one_port_text() -> (String, u16) {
    let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    (TWO_LOOPS.replace("bind = \"127.0.0.1:0\"", &format!("bind = \"127.0.0.1:{port}\"")), port)
}

/// The two loops on one free port of 127.0.0.1, and the port.
fn one_port() -> (Config, u16) {
    let (text, port) = one_port_text();
    let cfg = parse(&text).unwrap();
    assert_eq!(port_groups(&cfg.loops), [vec![0, 1]]);
    (cfg, port)
}

/// Datagrams per frame of `send_frame`.
const PACKETS: u64 = (loops_support::FRAME_LEN / loops_support::STRIDE) as u64;

#[test]
fn two_loops_on_one_port_each_get_their_own_stream() {
    let _one = one_at_a_time();
    let (cfg, port) = one_port();
    let (set, seen) = start(&cfg, None);
    let at = addr(&set, "cam0");
    assert_eq!((at, addr(&set, "cam1")), (SocketAddr::from(([127, 0, 0, 1], port)), at));
    assert_eq!((set.shared_port_of("cam0"), set.shared_port_of("cam1")), (Some(at), Some(at)));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..FRAMES {
        // Stream 3 is nobody's: counted and dropped.
        for stream in [2, 3, 1] {
            send_frame(&socket, at, stream, seq);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "every frame's result",
        || (count(&seen, "cam0") >= FRAMES as usize && count(&seen, "cam1") >= FRAMES as usize).then_some(()),
        || set.progress_line(),
    );
    let report = set.stop();
    assert!(report.down().is_empty(), "{:?}", report.down());
    let seen = seen.lock().unwrap();
    for (name, stream, chain) in [("cam0", 1, &cfg.loops[0].chain), ("cam1", 2, &cfg.loops[1].chain)] {
        let results = &seen[name];
        assert_eq!(results.len(), FRAMES as usize, "{name}: one result per frame");
        let mut seqs: Vec<u64> = results.iter().map(|r| r.frame_seq).collect();
        seqs.sort_unstable();
        assert_eq!(seqs, (0..FRAMES).collect::<Vec<_>>(), "{name}: every frame once");
        for r in results {
            assert_eq!(r.stream_id, stream, "{name} saw a frame of another loop's stream");
            check_result(r, &reference_chain(chain, &payload(stream, r.frame_seq)));
        }
    }
    // The first loop on the port counts what no loop takes; each datagram counts once.
    let ingest = |i: usize| report.loops[i].report.as_ref().unwrap().ingest;
    let (a, b) = (ingest(0), ingest(1));
    assert_eq!(
        (a.datagrams, a.packets_accepted, a.unknown_stream),
        (2 * FRAMES * PACKETS, FRAMES * PACKETS, FRAMES * PACKETS)
    );
    assert_eq!((b.datagrams, b.packets_accepted, b.unknown_stream), (FRAMES * PACKETS, FRAMES * PACKETS, 0));
    assert_eq!((a.datagrams_accounted(), b.datagrams_accounted()), (a.datagrams, b.datagrams));
    assert_eq!(report.loops[1].report.as_ref().unwrap().listen, at.to_string());
}

#[test]
fn a_loop_down_on_a_shared_port_leaves_the_other_served() {
    let _one = one_at_a_time();
    let (cfg, _) = one_port();
    let (mut set, seen) = start(&cfg, Some("cam1"));
    let at = addr(&set, "cam0");
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    send_frame(&socket, at, 2, 0);
    let down = wait_for("cam1 down", || Some(set.check()).filter(|d| !d.is_empty()), String::new);
    assert_eq!(down, ["cam1"]);
    // cam1's ring fills up behind its dead result thread; cam0 gets every frame.
    for seq in 0..FRAMES {
        send_frame(&socket, at, 1, seq);
        send_frame(&socket, at, 2, seq + 1);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "cam0's results",
        || (count(&seen, "cam0") >= FRAMES as usize).then_some(()),
        || set.progress_line(),
    );
    let report = set.stop();
    assert_eq!(report.down(), ["loop cam1 (its result thread stopped)"]);
    let cam0 = report.loops[0].report.as_ref().expect("cam0 stops cleanly");
    assert_eq!((cam0.loop_stats.frames_processed, cam0.ingest.unknown_stream), (FRAMES, 0));
    for r in &seen.lock().unwrap()["cam0"] {
        assert_eq!(r.stream_id, 1);
        check_result(r, &reference_chain(&cfg.loops[0].chain, &payload(1, r.frame_seq)));
    }
}

#[test]
fn a_loop_whose_result_thread_dies_is_down_and_the_other_keeps_processing() {
    let _one = one_at_a_time();
    let cfg = parse(TWO_LOOPS).unwrap();
    let (mut set, seen) = start(&cfg, Some("cam1"));
    let (a, b) = (addr(&set, "cam0"), addr(&set, "cam1"));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    send_frame(&socket, b, 2, 0);
    let down = wait_for("cam1 down", || Some(set.check()).filter(|d| !d.is_empty()), String::new);
    assert_eq!(down, ["cam1"]);
    assert!(!set.all_down());
    // cam0 serves its stream as before.
    for seq in 0..FRAMES {
        send_frame(&socket, a, 1, seq);
        send_frame(&socket, b, 2, seq + 1);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "cam0's results",
        || (count(&seen, "cam0") >= FRAMES as usize).then_some(()),
        || set.progress_line(),
    );
    assert_eq!(count(&seen, "cam1"), 0);
    let snapshot = set.metrics_snapshot();
    let up: Vec<(&str, bool)> = snapshot.loops.iter().map(|l| (l.name.as_str(), l.up)).collect();
    assert_eq!(up, [("cam0", true), ("cam1", false)]);
    let text = frameloop::service::metrics_http::render(&snapshot);
    assert!(text.contains("frameloop_stream_up{loop=\"cam1\",stream=\"2\"} 0"), "{text}");
    assert!(text.contains("frameloop_stream_up{loop=\"cam0\",stream=\"1\"} 1"), "{text}");
    let report = set.stop();
    assert_eq!(report.down(), ["loop cam1 (its result thread stopped)"]);
    let cam0 = report.loops[0].report.as_ref().expect("cam0 stops cleanly");
    assert_eq!(cam0.loop_stats.frames_processed, FRAMES);
    for r in &seen.lock().unwrap()["cam0"] {
        assert_eq!(r.stream_id, 1);
        check_result(r, &reference_chain(&cfg.loops[0].chain, &payload(1, r.frame_seq)));
    }
    assert!(report.render().contains("=== loop cam1 [DOWN: its result thread stopped] streams [2]"));
}

/// `frameloop run` over the two loops: both serve, the JSON report has one
/// entry per loop; with one loop's result thread made to die, the other
/// still processes everything and the exit status is 3.
#[test]
fn run_serves_two_loops_and_exits_3_when_one_went_down() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("loops.toml");
    std::fs::write(&config, TWO_LOOPS).unwrap();
    for poison in [None, Some("result@cam1")] {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_frameloop"));
        cmd.args(["run", "--config", config.to_str().unwrap(), "--duration", "4", "--json"])
            .env("NO_COLOR", "1")
            .env("FRAMELOOP_LOG", "info")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("FRAMELOOP_TEST_PANIC_THREAD")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        if let Some(p) = poison {
            cmd.env("FRAMELOOP_TEST_PANIC_THREAD", p);
        }
        let mut child = cmd.spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            use std::io::BufRead;
            let mut all = String::new();
            for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                all.push_str(&line);
                all.push('\n');
            }
            all
        });
        let mut ports = BTreeMap::new();
        while ports.len() < 2 {
            let line = rx.recv_timeout(PATIENCE).expect("both loops say where they listen");
            if let Some((before, after)) = line.split_once(" serving on ") {
                let name = before.rsplit(' ').next().unwrap().to_string();
                let at = after.split_whitespace().next().unwrap();
                ports.insert(name, at.parse::<SocketAddr>().unwrap());
            }
        }
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        for seq in 0..20 {
            send_frame(&socket, ports["cam0"], 1, seq);
            send_frame(&socket, ports["cam1"], 2, seq);
            std::thread::sleep(Duration::from_millis(2));
        }
        let out = child.wait_with_output().unwrap();
        let log = reader.join().unwrap();
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}\n{log}", String::from_utf8_lossy(&out.stdout));
        });
        let processed = |i: usize| report["loops"][i]["report"]["loop_stats"]["frames_processed"].as_u64();
        assert_eq!(report["loops"][0]["plan"]["name"], "cam0");
        assert_eq!(processed(0), Some(20), "{report:#}\n{log}");
        match poison {
            None => {
                assert!(out.status.success(), "{log}");
                assert_eq!(processed(1), Some(20), "{report:#}");
            }
            Some(_) => {
                assert_eq!(out.status.code(), Some(3), "{log}");
                assert_eq!(report["loops"][1]["down"], "its result thread stopped", "{report:#}");
                assert!(log.contains("loop cam1 is down"), "{log}");
                assert!(log.contains("loop cam1 (its result thread stopped) went down"), "{log}");
            }
        }
    }
}

/// A resident loop that tears itself down (here its `timeout_ms` without a
/// frame, as a faulted GPU graph would) marks its loop down; the other loop
/// keeps processing.
#[test]
fn a_loop_whose_resident_loop_stops_is_down_and_the_other_keeps_processing() {
    let _one = one_at_a_time();
    let text = TWO_LOOPS.replace("name = \"cam1\"", "name = \"cam1\"\ntimeout_ms = 200");
    let cfg = parse(&text).unwrap();
    assert_eq!(cfg.loops[1].settings.timeout_ms, 200);
    let (mut set, seen) = start(&cfg, None);
    let down = wait_for("cam1 down", || Some(set.check()).filter(|d| !d.is_empty()), String::new);
    assert_eq!(down, ["cam1"]);
    let (a, socket) = (addr(&set, "cam0"), UdpSocket::bind("127.0.0.1:0").unwrap());
    for seq in 0..FRAMES {
        send_frame(&socket, a, 1, seq);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "cam0's results",
        || (count(&seen, "cam0") >= FRAMES as usize).then_some(()),
        || set.progress_line(),
    );
    assert!(set.check().is_empty(), "a loop goes down once");
    let report = set.stop();
    assert_eq!(report.down(), ["loop cam1 (its resident loop stopped)"]);
    assert_eq!(report.loops[0].report.as_ref().unwrap().loop_stats.frames_processed, FRAMES);
}

/// `frameloop run` with two loops on one port whose receiver dies: both
/// loops are reported down for it, the process stops by itself (every loop
/// down) and exits 3.
#[test]
fn run_reports_every_loop_of_a_shared_port_down_when_its_receiver_dies() {
    let _one = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("loops.toml");
    let (text, port) = one_port_text();
    std::fs::write(&config, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_frameloop"))
        .args(["run", "--config", config.to_str().unwrap(), "--duration", "30", "--json"])
        .env("NO_COLOR", "1")
        .env("FRAMELOOP_LOG", "info")
        .env("FRAMELOOP_TEST_PANIC_THREAD", "receiver")
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{log}");
    let report: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{log}"));
    let why = format!("the receiver of its shared port 127.0.0.1:{port} stopped");
    for i in 0..2 {
        assert_eq!(report["loops"][i]["down"], why.as_str(), "{report:#}");
    }
    assert!(log.contains("every loop is down; shutting down"), "{log}");
}
