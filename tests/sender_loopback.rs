//! The sender over real loopback sockets: exact frame and packet counts,
//! timestamps, identical datagrams with and without UDP GSO, the fallback
//! when the kernel refuses GSO, stop, pacing and counted refusals.

use frameloop::sender::{
    CATCH_UP_BURST_NS, GsoMode, GsoStatus, LINK_LAG_TOLERANCE_NS, Pattern, SendArgs, SendError, SenderStats,
    build_frame_datagrams, open_socket, run_sender, run_sender_on,
};
use frameloop::wire::native;
use socket2::{Domain, Protocol, Socket, Type};
use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A loopback receiver collecting datagrams on its own thread until
/// `expected` arrived or nothing came for a while.
struct Collector {
    addr: SocketAddr,
    /// Each datagram with the CLOCK_REALTIME time it was read.
    thread: JoinHandle<Vec<(u64, Vec<u8>)>>,
}

impl Collector {
    fn start(expected: usize) -> Collector {
        let s = Socket::new(Domain::IPV4, Type::DGRAM, Some(Protocol::UDP)).unwrap();
        s.set_recv_buffer_size(8 << 20).unwrap();
        s.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
        let sock: UdpSocket = s.into();
        sock.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
        let addr = sock.local_addr().unwrap();
        let thread = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = vec![0u8; 65536];
            let mut last = Instant::now();
            while got.len() < expected && last.elapsed() < Duration::from_secs(3) {
                if let Ok(n) = sock.recv(&mut buf) {
                    got.push((frameloop::clock::realtime_ns(), buf[..n].to_vec()));
                    last = Instant::now();
                }
            }
            got
        });
        Collector { addr, thread }
    }

    fn finish(self) -> Vec<Vec<u8>> {
        self.finish_timed().into_iter().map(|(_, d)| d).collect()
    }

    fn finish_timed(self) -> Vec<(u64, Vec<u8>)> {
        self.thread.join().unwrap()
    }
}

fn args(to: SocketAddr) -> SendArgs {
    SendArgs::new(to.to_string())
}

/// Checks that `got` holds exactly frames 0..frames of a run with `a`'s
/// settings, byte for byte, and returns each frame's timestamp in send order.
fn check_frames(got: &[Vec<u8>], a: &SendArgs, frames: u64) -> Vec<u64> {
    let mut by_frame: BTreeMap<(u64, u32), Vec<Vec<u8>>> = BTreeMap::new();
    for d in got {
        let (h, _) = native::parse(d).expect("sender datagrams parse");
        by_frame.entry((h.frame_seq, h.stream_id)).or_default().push(d.clone());
    }
    assert_eq!(by_frame.len() as u64, frames, "distinct frames received");
    let mut stamps = Vec::new();
    for k in 0..frames {
        let (stream, seq) = ((k % a.streams as u64) as u32, k / a.streams as u64);
        let packets = &by_frame[&(seq, stream)];
        let ts = native::parse(&packets[0]).unwrap().0.sender_ts_ns;
        let expected: Vec<_> =
            build_frame_datagrams(stream, seq, a.frame_bytes, a.packet_bytes, ts, a.pattern)
                .unwrap()
                .collect();
        assert_eq!(packets, &expected, "frame {k}: datagrams as built, in order, one timestamp");
        stamps.push(ts);
    }
    stamps
}

fn no_errors(stats: &SenderStats) {
    let e = stats.errors;
    assert_eq!((e.refused_packets, e.abandoned_packets, e.gso_fallbacks), (0, 0, 0), "{stats:?}");
}

#[test]
fn sends_exactly_count_frames_with_increasing_timestamps() {
    let frames = 40;
    let collector = Collector::start(frames * 8);
    let a = SendArgs { count: Some(frames as u64), streams: 3, rate: 2000.0, ..args(collector.addr) };
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    let got = collector.finish();
    assert_eq!((stats.frames, stats.packets, stats.packets_per_frame), (40, 320, 8));
    assert_eq!(stats.bytes, got.iter().map(|d| d.len() as u64).sum::<u64>());
    assert_eq!(got.len(), 320, "every datagram arrived");
    no_errors(&stats);
    let stamps = check_frames(&got, &a, frames as u64);
    assert!(stamps.windows(2).all(|w| w[0] < w[1]), "timestamps increase frame to frame: {stamps:?}");
    // Frames are 0.5 ms apart; the stamps must reflect the schedule, not a
    // burst. A frame sent late (a descheduled thread) shortens the span by at
    // most the sender's own worst lag, which it reports.
    let slack = stats.max_schedule_lag_ns + 100_000;
    assert!(
        stamps[39] - stamps[0] + slack >= 39 * 500_000,
        "span {} ns, worst lag {} ns",
        stamps[39] - stamps[0],
        stats.max_schedule_lag_ns
    );
    assert!(stats.max_schedule_lag_ns < 50_000_000, "the sender kept to its schedule: {stats:?}");
}

fn send_and_collect(a: &SendArgs, socket: Option<Socket>) -> (Result<SenderStats, SendError>, Vec<Vec<u8>>) {
    let expected = a.count.unwrap() as usize * 47;
    let collector = Collector::start(expected);
    let a = SendArgs { to: collector.addr.to_string(), ..a.clone() };
    let stop = AtomicBool::new(false);
    let result = match socket {
        Some(s) => {
            s.connect(&collector.addr.into()).unwrap();
            run_sender_on(s, &a, &stop, |_| {})
        }
        None => run_sender(&a, &stop, |_| {}),
    };
    (result, collector.finish())
}

fn masked_timestamps(got: &[Vec<u8>]) -> Vec<Vec<u8>> {
    got.iter()
        .map(|d| {
            let mut d = d.clone();
            d[40..48].fill(0);
            d
        })
        .collect()
}

#[test]
fn gso_and_plain_paths_deliver_identical_datagrams() {
    // 1472-byte datagrams: 47 per 64 KiB frame, so GSO messages carry up to 44.
    let base = SendArgs {
        count: Some(12),
        packet_bytes: 1472,
        pattern: Pattern::Random,
        ..args(([127, 0, 0, 1], 9).into())
    };
    let (gso, with_gso) = send_and_collect(&SendArgs { gso: GsoMode::On, ..base.clone() }, None);
    let (plain, without) = send_and_collect(&SendArgs { gso: GsoMode::Off, ..base.clone() }, None);
    let (gso, plain) = (gso.unwrap(), plain.unwrap());
    assert_eq!((gso.gso, plain.gso), (GsoStatus::Active, GsoStatus::Off));
    assert_eq!((gso.packets, plain.packets, gso.bytes), (12 * 47, 12 * 47, plain.bytes));
    no_errors(&gso);
    no_errors(&plain);
    check_frames(&with_gso, &base, 12);
    assert_eq!(masked_timestamps(&with_gso), masked_timestamps(&without));
}

/// A socket on which the kernel refuses GSO sends: with UDP checksums off
/// (SO_NO_CHECK) it accepts the UDP_SEGMENT option but fails each GSO send
/// with EINVAL, while sending single datagrams normally.
fn socket_refusing_gso() -> Socket {
    let s = open_socket("127.0.0.1:9".parse().unwrap(), None).unwrap();
    let one: libc::c_int = 1;
    // SAFETY: the option value is a live c_int of the declared size.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
    s
}

#[test]
fn refused_gso_falls_back_in_auto_mode_and_stops_in_on_mode() {
    let base = SendArgs { count: Some(5), packet_bytes: 1472, ..args(([127, 0, 0, 1], 9).into()) };
    let (auto, got) = send_and_collect(&base, Some(socket_refusing_gso()));
    let auto = auto.unwrap();
    assert_eq!(auto.gso, GsoStatus::RefusedOnSend);
    assert_eq!(auto.errors.gso_fallbacks, 1);
    assert_eq!(auto.packets, 5 * 47);
    check_frames(&got, &base, 5);

    let (on, _) = send_and_collect(&SendArgs { gso: GsoMode::On, ..base }, Some(socket_refusing_gso()));
    let err = on.unwrap_err();
    assert!(matches!(err, SendError::GsoRefused { .. }), "{err:?}");
    assert!(err.to_string().contains("--gso auto"), "the message names the fix: {err}");
}

#[test]
fn duration_is_roughly_respected() {
    let collector = Collector::start(usize::MAX);
    let a = SendArgs { duration: Some(0.3), frame_bytes: 1000, ..args(collector.addr) };
    let started = Instant::now();
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    let took = started.elapsed();
    // 300 frames are due in 0.3 s at 1000 frames/s; allow a loaded machine a wide margin.
    assert!((200..=301).contains(&stats.frames), "{stats:?}");
    assert!(took >= Duration::from_millis(290) && took < Duration::from_secs(3), "{took:?}");
    assert!(stats.elapsed_s >= 0.29, "{stats:?}");
    drop(collector);
}

#[test]
fn a_late_sender_sends_what_it_owes_at_its_catch_up_rate_not_in_one_burst() {
    // 1,000 frames/s; the progress call (after about 500 frames) holds the
    // sender up for 2.5 ms, so it is 1.5 ms behind. At --catch-up 1.25 the
    // frames it owes go out 0.8 ms apart (the first 0.25 ms sooner: the
    // burst allowance), not back to back, until the schedule is met again
    // seven frames later. A busy machine can stall the sender for more than
    // 5 ms in those frames (it then drops the deficit instead), so the
    // catch-up is looked for in up to three runs; every run must keep to
    // the rate limit.
    let mut seen = Vec::new();
    for _ in 0..3 {
        let catching_up = late_sender_run();
        let median = catching_up[catching_up.len() / 2];
        if (600.0..=950.0).contains(&median) {
            return;
        }
        seen.push(catching_up);
    }
    panic!("catch-up gaps {seen:?} µs: 800 expected");
}

/// One run of [`a_late_sender_sends_what_it_owes_at_its_catch_up_rate_not_in_one_burst`]:
/// checks the counts and the rate limit, and returns the six gaps after
/// the hold, sorted, in µs.
fn late_sender_run() -> Vec<f64> {
    const FRAMES: usize = 1000;
    let collector = Collector::start(FRAMES);
    let a =
        SendArgs { count: Some(FRAMES as u64), frame_bytes: 1000, catch_up: 1.25, ..args(collector.addr) };
    let mut held = None;
    let stats = run_sender(&a, &AtomicBool::new(false), |p| {
        if held.is_none() {
            held = Some(p.frames);
            std::thread::sleep(Duration::from_micros(2_500));
        }
    })
    .unwrap();
    no_errors(&stats);
    // A counted run sends every frame, even where a busy machine held the
    // sender up more than 5 ms somewhere else in the run.
    assert_eq!((stats.frames, stats.skipped_frames), (FRAMES as u64, 0), "{stats:?}");
    let got: Vec<_> = collector.finish();
    let stamps = check_frames(&got, &a, FRAMES as u64);
    let held = held.expect("a run of 1 s reports progress") as usize;
    // Whatever else held it up, no frame left sooner than the catch-up rate
    // allows: a frame's earliest time moves on 800 µs from the later of that
    // time and the frame before it, less the burst allowance (and 20 µs for
    // the time between the sender's clock read and the stamp).
    let burst = CATCH_UP_BURST_NS as f64;
    let mut next_ns = stamps[0] as f64;
    for (k, &t) in stamps.iter().enumerate() {
        assert!(
            t as f64 >= next_ns - burst - 20_000.0,
            "frame {k} left {} µs early",
            (next_ns - burst - t as f64) / 1e3
        );
        next_ns = next_ns.max(t as f64) + 800_000.0;
    }
    // Frame `held` is the first sent after the hold; the six after it catch up.
    let gap_us = |k: usize| (stamps[k] - stamps[k - 1]) as f64 / 1e3;
    assert!(gap_us(held) >= 2_400.0, "the hold shows before frame {held}: {} µs", gap_us(held));
    let mut catching_up: Vec<f64> = (held + 1..held + 7).map(gap_us).collect();
    catching_up.sort_by(f64::total_cmp);
    catching_up
}

#[test]
fn a_sender_that_cannot_hold_its_rate_counts_the_frames_it_left_out() {
    // Far more frames a second than one thread can send: the sender keeps
    // falling more than 5 ms behind, moves its schedule on, and counts what
    // it skipped, so sent + skipped is every frame the schedule held.
    let sink = UdpSocket::bind("127.0.0.1:0").unwrap();
    let a = SendArgs {
        rate: 5_000_000.0,
        duration: Some(0.2),
        frame_bytes: 16,
        packet_bytes: 64,
        gso: GsoMode::Off,
        pacing: frameloop::sender::Pacing::Sleep,
        ..args(sink.local_addr().unwrap())
    };
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    assert!(stats.schedule_rebases > 0 && stats.skipped_frames > 0, "{stats:?}");
    let accounted = stats.frames + stats.skipped_frames;
    // Each move rounds the frames it skipped down by less than one.
    assert!(
        (1_000_000 - stats.schedule_rebases..=1_000_000).contains(&accounted),
        "sent {} + skipped {} of 1,000,000 due ({} moves)",
        stats.frames,
        stats.skipped_frames,
        stats.schedule_rebases
    );
}

#[test]
fn stop_ends_an_unbounded_run_and_progress_is_reported() {
    let collector = Collector::start(usize::MAX);
    let a = SendArgs { frame_bytes: 1000, rate: 500.0, ..args(collector.addr) };
    let stop = AtomicBool::new(false);
    let mut reports = Vec::new();
    let stats = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(1200));
            stop.store(true, Ordering::Relaxed);
        });
        run_sender(&a, &stop, |p| reports.push(p.frames)).unwrap()
    });
    assert!(stats.frames > 100 && stats.frames < 1200, "{stats:?}");
    assert!(!reports.is_empty(), "progress was reported at least once in 1.2 s");
    assert!(reports.windows(2).all(|w| w[0] <= w[1]) && *reports.last().unwrap() <= stats.frames);
    drop(collector);
}

#[test]
fn datagrams_refused_by_a_closed_port_are_counted_not_lost() {
    // Take a free port, then close it: the ICMP port-unreachable replies make
    // later sends fail with ECONNREFUSED.
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let a = SendArgs { count: Some(50), packet_bytes: 1472, gso: GsoMode::Off, ..args(closed) };
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    assert_eq!(stats.frames, 50);
    assert!(stats.errors.refused_packets > 0, "{stats:?}");
    assert_eq!(stats.packets + stats.errors.refused_packets, 50 * 47, "{stats:?}");
}

#[test]
fn bad_settings_are_refused_before_sending() {
    let stop = AtomicBool::new(false);
    let to: SocketAddr = ([127, 0, 0, 1], 9).into();
    for (a, needle) in [
        (SendArgs { rate: 0.0, ..args(to) }, "--rate"),
        (SendArgs { duration: Some(-1.0), ..args(to) }, "--duration"),
        (SendArgs { streams: 0, ..args(to) }, "--streams"),
        (SendArgs { catch_up: 0.5, ..args(to) }, "--catch-up 0.5 is not a number of at least 1"),
        (SendArgs { catch_up: f64::INFINITY, ..args(to) }, "--catch-up inf"),
        (SendArgs { packet_bytes: 40, ..args(to) }, "--packet-bytes"),
        (SendArgs { to: "no-port".into(), ..args(to) }, "--to"),
        (SendArgs { bind: Some("[::1]:0".parse().unwrap()), ..args(to) }, "--bind"),
        (SendArgs { link_gbps: Some(0.0), ..args(to) }, "--link-gbps 0 is not a positive"),
        (SendArgs { link_gbps: Some(f64::NAN), ..args(to) }, "--link-gbps NaN"),
        // 1,000 frames/s of 65,536 bytes (8 datagrams, 66,448 link bytes) need 0.532 Gb/s.
        (
            SendArgs { link_gbps: Some(0.5), ..args(to) },
            "needs 0.532 Gb/s); raise --link-gbps or lower --rate",
        ),
    ] {
        let err = run_sender(&a, &stop, |_| {}).unwrap_err();
        assert!(err.to_string().contains(needle), "{needle}: {err}");
    }
}

#[test]
fn a_link_rate_spreads_each_frame_over_the_time_that_link_takes_to_carry_it() {
    // 100 datagrams of 1,472 bytes a frame at 1 Gb/s: 1,538 link bytes, 12.3 µs,
    // each, so a frame takes 1.23 ms on the link instead of one burst.
    const DATAGRAMS: u64 = 100;
    let ns_per_datagram = 1538.0 * 8.0;
    for (gso, per_message) in [(GsoMode::Off, 1), (GsoMode::On, 44)] {
        let collector = Collector::start(4 * DATAGRAMS as usize);
        let a = SendArgs {
            count: Some(4),
            rate: 200.0,
            frame_bytes: DATAGRAMS * (1472 - 48),
            packet_bytes: 1472,
            gso,
            link_gbps: Some(1.0),
            ..args(collector.addr)
        };
        let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
        no_errors(&stats);
        let got = collector.finish_timed();
        check_frames(&got.iter().map(|(_, d)| d.clone()).collect::<Vec<_>>(), &a, 4);
        let mut last_after_start = Vec::new();
        for (read_ns, d) in &got {
            let (h, _) = native::parse(d).unwrap();
            // The header's time is taken before the frame's first send, and a
            // datagram is read after it was sent, so no pacing error can make
            // this early: datagram i leaves once the link carried those
            // before its message.
            let message_start = u64::from(h.packet_index) / per_message * per_message;
            let due = (message_start as f64 * ns_per_datagram) as u64;
            let after_start = read_ns.saturating_sub(h.sender_ts_ns);
            assert!(
                after_start >= due,
                "{gso:?}: datagram {} of frame {} read {after_start} ns after the frame started, due at {due}",
                h.packet_index,
                h.frame_seq
            );
            if u64::from(h.packet_index) == DATAGRAMS - 1 {
                last_after_start.push(after_start);
            }
        }
        assert_eq!(last_after_start.len(), 4, "{gso:?}: every frame's last datagram arrived");
    }
}

#[test]
fn a_link_pace_the_sender_cannot_keep_is_reported() {
    // 100 datagrams a frame on a 10 Tb/s link: 1.2 ns of link time each, so
    // by its last datagram a frame is as far behind the link as its sends
    // took (microseconds), and every frame counts.
    const DATAGRAMS: u64 = 100;
    let collector = Collector::start(4 * DATAGRAMS as usize);
    let a = SendArgs {
        count: Some(4),
        rate: 200.0,
        frame_bytes: DATAGRAMS * (1472 - 48),
        packet_bytes: 1472,
        gso: GsoMode::Off,
        link_gbps: Some(10_000.0),
        ..args(collector.addr)
    };
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    no_errors(&stats);
    check_frames(&collector.finish(), &a, 4);
    assert_eq!(stats.frames_behind_link, 4, "{stats:?}");
    assert!(stats.max_link_lag_ns > LINK_LAG_TOLERANCE_NS, "{stats:?}");
    let warning = stats.link_lag_warning(a.link_gbps).expect("the user is told");
    assert!(warning.starts_with("4 of 4 frames left slower than --link-gbps 10000"), "{warning}");
    // Without a link pace there is nothing to fall behind.
    let collector = Collector::start(4 * DATAGRAMS as usize);
    let a = SendArgs { link_gbps: None, to: collector.addr.to_string(), ..a };
    let stats = run_sender(&a, &AtomicBool::new(false), |_| {}).unwrap();
    collector.finish();
    assert_eq!((stats.frames_behind_link, stats.max_link_lag_ns), (0, 0));
}
