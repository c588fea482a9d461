//! Two resident loops on GPU 0 (ignored without a GPU; run on the GPU
//! machine with `--include-ignored --test-threads=1`): two streams on two
//! UDP ports, each served by its own resident graph with its own chain, every
//! result checked against the CPU reference of that loop's chain; the same
//! two loops on one UDP port, its receiver routing each loop its stream; and
//! one loop going down leaving the other processing.

mod appliance_support;
mod loops_support;

use appliance_support::{check_result, one_at_a_time, reference_chain, wait_for};
use frameloop::config::{Config, parse};
use frameloop::ring::layout::RESULT_GPU_CLOCK;
use loops_support::{FRAMES, TWO_LOOPS, addr, count, payload, send_frame, start};
use std::net::UdpSocket;
use std::time::Duration;

/// The host test's two loops over UDP, both on GPU 0, or cam1 on GPU
/// `FRAMELOOP_TEST_SECOND_GPU` (a multi-GPU machine: one loop per GPU).
fn gpu_config() -> Config {
    let second = std::env::var("FRAMELOOP_TEST_SECOND_GPU").unwrap_or_else(|_| "0".into());
    let text = TWO_LOOPS
        .replace("backend = \"host\"", "backend = \"cuda\"")
        .replace("frame_timeout_ms = 1000", "frame_timeout_ms = 1000\ntransport = \"udp\"");
    let text = text
        .replace("name = \"cam0\"", "name = \"cam0\"\ngpu = 0")
        .replace("name = \"cam1\"", &format!("name = \"cam1\"\ngpu = {second}"));
    parse(&text).unwrap()
}

#[test]
#[ignore = "needs a GPU"]
fn two_resident_loops_on_one_gpu_process_their_own_streams() {
    let _one = one_at_a_time();
    frameloop::app::init_logging();
    let cfg = gpu_config();
    let (set, seen) = start(&cfg, None);
    let (a, b) = (addr(&set, "cam0"), addr(&set, "cam1"));
    assert_eq!(set.appliance("cam0").unwrap().backend().name(), "cuda");
    for l in &cfg.loops {
        println!("loop {} on {:?}", l.name, l.gpu);
    }
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..FRAMES {
        send_frame(&socket, a, 1, seq);
        send_frame(&socket, b, 2, seq);
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
            assert_ne!(r.result_flags & RESULT_GPU_CLOCK, 0, "{name}: the GPU computed it");
            check_result(r, &reference_chain(chain, &payload(stream, r.frame_seq)));
        }
    }
    for outcome in &report.loops {
        let r = outcome.report.as_ref().unwrap();
        println!("loop {}: {}", outcome.plan.name, r.latency.progress_line());
    }
}

#[test]
#[ignore = "needs a GPU"]
fn one_resident_loop_down_leaves_the_other_processing() {
    let _one = one_at_a_time();
    frameloop::app::init_logging();
    let cfg = gpu_config();
    let (mut set, seen) = start(&cfg, Some("cam1"));
    let (a, b) = (addr(&set, "cam0"), addr(&set, "cam1"));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    send_frame(&socket, b, 2, 0);
    let down = wait_for("cam1 down", || Some(set.check()).filter(|d| !d.is_empty()), String::new);
    assert_eq!(down, ["cam1"]);
    for seq in 0..FRAMES {
        send_frame(&socket, a, 1, seq);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(
        "cam0's results",
        || (count(&seen, "cam0") >= FRAMES as usize).then_some(()),
        || set.progress_line(),
    );
    let report = set.stop();
    assert_eq!(report.down(), ["loop cam1 (its result thread stopped)"]);
    for r in &seen.lock().unwrap()["cam0"] {
        check_result(r, &reference_chain(&cfg.loops[0].chain, &payload(1, r.frame_seq)));
    }
}

/// Both loops on GPU 0 and on ONE UDP port: the port's receiver routes each
/// loop its stream by id; every result checked against its loop's chain.
#[test]
#[ignore = "needs a GPU"]
fn two_resident_loops_on_one_port_get_their_own_streams() {
    let _one = one_at_a_time();
    frameloop::app::init_logging();
    let port = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut cfg = gpu_config();
    for l in &mut cfg.loops {
        l.ingest.bind = format!("127.0.0.1:{port}");
    }
    assert_eq!(frameloop::config::loops::port_groups(&cfg.loops), [vec![0, 1]]);
    let (set, seen) = start(&cfg, None);
    let at = addr(&set, "cam0");
    assert_eq!((at.port(), addr(&set, "cam1")), (port, at));
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    for seq in 0..FRAMES {
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
            assert_ne!(r.result_flags & RESULT_GPU_CLOCK, 0, "{name}: the GPU computed it");
            check_result(r, &reference_chain(chain, &payload(stream, r.frame_seq)));
        }
    }
    let unknown: Vec<u64> =
        report.loops.iter().map(|l| l.report.as_ref().unwrap().ingest.unknown_stream).collect();
    assert_eq!(unknown, [FRAMES * 10, 0], "stream 3 counted once, in the port's first loop");
}
