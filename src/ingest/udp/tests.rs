use super::*;
use crate::ingest::allow::AllowList;
use crate::ingest::assembly_thread::AssemblyStage;
use crate::ingest::deliver::tests::{LOCAL, coalesced, coalesced_frame, reassembler};
use crate::ingest::handoff::{self, ReadingSide};
use crate::ingest::socket::set_int_option;
use crate::ring::layout::ring_bytes;
use crate::ring::layout::{SLOT_COMPLETE, SlotHeader};
use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
use std::os::fd::RawFd;
use std::sync::atomic::Ordering;

/// Runs a receiver bound by `cfg` on its own thread, sends one frame of
/// `len` bytes in `segment`-byte datagrams, and returns what the ring got.
fn receive_one_frame(cfg: UdpConfig, len: usize, segment: usize) -> (SlotHeader, Vec<u8>, Vec<u8>) {
    let (header, payload, frame, _) = receive_one_frame_with(cfg, Default::default(), len, segment, None);
    (header, payload, frame)
}

/// As [`receive_one_frame`], reassembling under `reassembly`; with
/// `behind`, the frame is sent before the receiver starts and waits that
/// long in the socket. Also returns the counters at the end.
fn receive_one_frame_with(
    cfg: UdpConfig,
    reassembly: crate::ingest::ReassemblyConfig,
    len: usize,
    segment: usize,
    behind: Option<Duration>,
) -> (SlotHeader, Vec<u8>, Vec<u8>, crate::ingest::IngestSnapshot) {
    let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
    let mut rd = ring.reader().unwrap();
    let r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
    let counters = Arc::clone(r.counters());
    let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
    let to = receiver.local_addr();
    let stop = Arc::new(AtomicBool::new(false));
    let thread_stop = Arc::clone(&stop);
    let start = move || std::thread::spawn(move || receiver.run(&thread_stop));
    let (buf, frame) = coalesced(len, segment);
    let send = || {
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        for d in buf.chunks(segment) {
            tx.send_to(d, to).unwrap();
        }
    };
    let handle = match behind {
        None => {
            let handle = start();
            send();
            handle
        }
        Some(wait) => {
            send();
            std::thread::sleep(wait);
            start()
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while counters.snapshot().frames_complete + counters.snapshot().frames_incomplete == 0
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    stop.store(true, Ordering::Release);
    handle.join().unwrap().unwrap();
    let slot = rd.claim().expect("the frame was published");
    (slot.header, slot.payload.to_vec(), frame, counters.snapshot())
}

#[test]
fn a_polling_receiver_with_realtime_priority_assembles_frames() {
    // The priority is applied where permitted and logged and skipped
    // elsewhere; either way the spinning receiver must deliver the frame.
    let cfg = UdpConfig {
        bind: "127.0.0.1:0".into(),
        poll_budget_us: 200,
        realtime_priority: 1,
        ..UdpConfig::default()
    };
    let (header, payload, frame) = receive_one_frame(cfg, 6000, 1048);
    assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 6));
    assert_eq!(payload, frame);
}

#[test]
fn a_receiver_behind_its_socket_loses_nothing_that_arrived_in_time() {
    // The whole frame waits in the socket for longer than the frame
    // timeout before the receiver reads it: its packets arrived within
    // the timeout (by their kernel timestamps), so the frame completes;
    // with an assembly thread too, which gets it in three batches of two
    // and may tick between them (a frame goes stale only by what the
    // reading thread has found the socket empty after).
    for assembly_thread in [false, true] {
        let cfg = UdpConfig {
            bind: "127.0.0.1:0".into(),
            gro: false,
            batch: 2,
            assembly_thread,
            ..UdpConfig::default()
        };
        let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 2, ..Default::default() };
        let (header, payload, frame, s) =
            receive_one_frame_with(cfg, reassembly, 6000, 1048, Some(Duration::from_millis(30)));
        assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 6), "{assembly_thread}");
        assert_eq!(payload, frame);
        assert_eq!((s.frames_timed_out, s.late), (0, 0));
    }
}

#[test]
fn a_blocking_receiver_assembles_frames() {
    let cfg = UdpConfig { bind: "127.0.0.1:0".into(), gro: false, ..UdpConfig::default() };
    let (header, payload, frame) = receive_one_frame(cfg, 3000, 1048);
    assert_eq!((header.flags, header.packets_received), (SLOT_COMPLETE, 3));
    assert_eq!(payload, frame);
}

#[test]
fn a_backlog_after_a_wait_lands_in_place() {
    // A receiver that found its socket empty plans few landing places;
    // once a busy-polling one comes back from a wait, a whole frame may
    // be waiting, and every datagram of it should still land in its slot
    // in one copy.
    const SLOT: usize = 192 * 1024;
    let mem = HostMemory::new(ring_bytes(8, SLOT).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), 8, SLOT, OverrunPolicy::Every).unwrap();
    let mut rd = ring.reader().unwrap();
    let r = Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default());
    let counters = Arc::clone(r.counters());
    let cfg = UdpConfig { bind: "127.0.0.1:0".into(), gro: false, batch: 16, ..UdpConfig::default() };
    let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
    let to = receiver.local_addr();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let segment = 4500;
    let (first, frame) = coalesced_frame(170_003, segment, 0);
    let (second, _) = coalesced_frame(170_003, segment, 1);
    let count = first.chunks(segment).count() as u64;
    assert!(count > 2 * receiver.batch.buffers() as u64, "the frame outnumbers the receive buffers");
    let send_frame = |buf: &[u8]| {
        for d in buf.chunks(segment) {
            tx.send_to(d, to).unwrap();
        }
    };
    let drain_until = |receiver: &mut UdpReceiver, complete: u64| {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counters.snapshot().frames_complete < complete && std::time::Instant::now() < deadline {
            receiver.drain().unwrap();
        }
        assert_eq!(counters.snapshot().frames_complete, complete);
    };
    send_frame(&first);
    drain_until(&mut receiver, 1);
    // The socket is empty now: the next plan is a short one.
    assert_eq!(receiver.drain().unwrap().buffers, 0);
    assert!(receiver.landing_shape.buffers < receiver.batch.buffers());
    let placed = counters.snapshot().placed_by_kernel;
    send_frame(&second);
    receiver.expect_backlog();
    drain_until(&mut receiver, 2);
    let s = counters.snapshot();
    assert_eq!(s.placed_by_kernel - placed, count, "every datagram of the second frame placed by the kernel");
    assert_eq!((s.datagrams, s.packets_accepted), (2 * count, 2 * count));
    for seq in 0..2 {
        let slot = rd.claim().expect("both frames were published");
        assert_eq!((slot.header.frame_seq, slot.header.flags), (seq, SLOT_COMPLETE));
        assert_eq!(slot.payload, &frame[..]);
        let claimed = slot.seq;
        rd.finish(claimed);
    }
}

/// A native frame's datagrams (`segment` bytes at most) for stream 0.
fn frame_datagrams(len: usize, segment: usize, frame_seq: u64) -> (Vec<Vec<u8>>, Vec<u8>) {
    let (buf, frame) = coalesced_frame(len, segment, frame_seq);
    (buf.chunks(segment).map(<[u8]>::to_vec).collect(), frame)
}

/// A tap whose datagrams the test can read while the receiver owns it.
#[derive(Clone, Default)]
struct Shared(Arc<std::sync::Mutex<Vec<Vec<u8>>>>);

impl DatagramTap for Shared {
    fn on_datagram(&mut self, _: SocketAddr, _: SocketAddr, bytes: &[u8], _: u64) {
        self.0.lock().unwrap().push(bytes.to_vec());
    }
}

/// A receiver with an assembly thread (`ingest.assembly_thread`) on a
/// ring of `slots` slots of `slot` bytes, started on its own thread;
/// `prepare` adjusts it before it runs.
struct Split {
    to: SocketAddr,
    counters: Arc<IngestCounters>,
    reader: RingReader,
    stop: Arc<AtomicBool>,
    handle: std::thread::JoinHandle<Result<(), IngestError>>,
}

impl Split {
    fn start(
        cfg: UdpConfig,
        reassembly: crate::ingest::ReassemblyConfig,
        slots: usize,
        slot: usize,
        prepare: impl FnOnce(&mut UdpReceiver),
    ) -> Self {
        let mem = HostMemory::new(ring_bytes(slots, slot).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), slots, slot, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        let r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
        let counters = Arc::clone(r.counters());
        let cfg = UdpConfig { bind: "127.0.0.1:0".into(), assembly_thread: true, ..cfg };
        let mut receiver = UdpReceiver::bind(&cfg, r).unwrap();
        assert!(receiver.has_assembly_thread());
        prepare(&mut receiver);
        let to = receiver.local_addr();
        let stop = Arc::new(AtomicBool::new(false));
        let thread_stop = Arc::clone(&stop);
        let handle = std::thread::spawn(move || receiver.run(&thread_stop));
        // The kernel turns receive stamping on a moment after the first
        // socket asks; until then a datagram is stamped when it is read,
        // and several readers' datagrams would be merged by that.
        std::thread::sleep(Duration::from_millis(20));
        Split { to, counters, reader, stop, handle }
    }

    /// Waits (5 s at most) until `done` holds for the counters.
    fn wait_until(&self, done: impl Fn(&crate::ingest::IngestSnapshot) -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done(&self.counters.snapshot()) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(done(&self.counters.snapshot()), "{:?}", self.counters.snapshot());
    }

    fn stop(self) -> (RingReader, Result<(), IngestError>) {
        self.stop.store(true, Ordering::Release);
        (self.reader, self.handle.join().unwrap())
    }
}

#[test]
fn an_assembly_thread_assembles_frames_with_and_without_gro() {
    for (gro, reading_threads) in [(true, 1), (false, 1), (true, 2), (false, 2)] {
        let cfg = UdpConfig {
            bind: "127.0.0.1:0".into(),
            gro,
            assembly_thread: true,
            reading_threads,
            ..UdpConfig::default()
        };
        let (header, payload, frame, s) = receive_one_frame_with(cfg, Default::default(), 7001, 1048, None);
        assert_eq!(
            (header.flags, header.packets_received),
            (SLOT_COMPLETE, 8),
            "gro {gro} {reading_threads}"
        );
        assert_eq!(payload, frame);
        assert_eq!((s.placed_by_kernel, s.datagrams, s.packets_accepted), (0, 8, 8));
    }
}

#[test]
fn an_assembly_thread_keeps_the_order_read_and_counts_every_datagram() {
    for reading_threads in [1, 3] {
        keeps_the_order_read_and_counts_every_datagram(reading_threads);
    }
}

fn keeps_the_order_read_and_counts_every_datagram(reading_threads: usize) {
    // Frames of 3 datagrams with a foreign datagram after every fifth
    // frame, sent faster than one batch at a time: every frame comes out
    // whole and in order, every foreign datagram is counted, and the tap
    // sees all of them in the order sent, however many threads read
    // them (the kernel spreads them over their sockets at random).
    const FRAMES: u64 = 300;
    let tap = Shared::default();
    let seen = tap.clone();
    let cfg = UdpConfig { gro: false, batch: 4, reading_threads, ..UdpConfig::default() };
    let mut split = Split::start(cfg, Default::default(), 512, 4096, |r| {
        assert_eq!(r.reading_threads(), reading_threads);
        r.set_tap(Box::new(tap));
    });
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (mut sent, mut frames, mut framed) = (Vec::new(), Vec::new(), 0u64);
    for seq in 0..FRAMES {
        let (datagrams, frame) = frame_datagrams(3000 + seq as usize, 1048, seq);
        framed += datagrams.len() as u64;
        for d in datagrams {
            tx.send_to(&d, split.to).unwrap();
            sent.push(d);
        }
        if seq % 5 == 4 {
            let foreign = vec![0x5a; 60];
            tx.send_to(&foreign, split.to).unwrap();
            sent.push(foreign);
        }
        frames.push(frame);
    }
    split.wait_until(|s| s.frames_complete == FRAMES && s.datagrams == sent.len() as u64);
    for (seq, frame) in frames.iter().enumerate() {
        let slot = split.reader.claim().expect("every frame was published");
        assert_eq!((slot.header.frame_seq, slot.header.flags), (seq as u64, SLOT_COMPLETE));
        assert_eq!(slot.payload, &frame[..]);
        let claimed = slot.seq;
        split.reader.finish(claimed);
    }
    let counters = Arc::clone(&split.counters);
    let (_, result) = split.stop();
    result.unwrap();
    assert_eq!(*seen.0.lock().unwrap(), sent, "the tap saw every datagram in the order sent");
    let s = counters.snapshot();
    assert_eq!((s.packets_accepted, s.bad_magic, s.frames_incomplete), (framed, FRAMES / 5, 0));
    assert_eq!(s.datagrams_accounted(), s.datagrams);
}

#[test]
fn an_assembly_thread_times_out_an_incomplete_frame_while_idle_and_flushes_at_stop() {
    // Frame 0 lacks its last datagram: with nothing more arriving it goes
    // stale by the clock and is published flagged. Frame 1 lacks one too,
    // but its timeout is far off: stopping publishes it flagged.
    let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 5, ..Default::default() };
    let split = Split::start(UdpConfig { gro: false, ..UdpConfig::default() }, reassembly, 8, 8192, |_| {});
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let (first, _) = frame_datagrams(4000, 1048, 0);
    for d in &first[..first.len() - 1] {
        tx.send_to(d, split.to).unwrap();
    }
    split.wait_until(|s| s.frames_timed_out == 1);
    let s = split.counters.snapshot();
    assert_eq!((s.frames_incomplete, s.frames_complete), (1, 0));
    split.stop().1.unwrap();
    let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 60_000, ..Default::default() };
    let mut split =
        Split::start(UdpConfig { gro: false, ..UdpConfig::default() }, reassembly, 8, 8192, |_| {});
    let (second, _) = frame_datagrams(4000, 1048, 1);
    for d in &second[1..] {
        tx.send_to(d, split.to).unwrap();
    }
    split.wait_until(|s| s.packets_accepted == second.len() as u64 - 1);
    assert!(split.reader.claim().is_none(), "nothing published before the stop");
    let counters = Arc::clone(&split.counters);
    let (mut reader, result) = split.stop();
    result.unwrap();
    let slot = reader.claim().expect("the stop flushed the frame in flight");
    assert_eq!((slot.header.frame_seq, slot.header.flags & SLOT_COMPLETE), (1, 0));
    assert_eq!(counters.snapshot().frames_incomplete, 1);
}

#[test]
fn the_assembly_thread_ages_frames_by_what_was_read_not_by_the_clock() {
    // Frame 0's first two datagrams are handed over, then nothing for
    // ten frame timeouts while the assembly thread idles and ticks: the
    // rest still waits in the socket (the reading side never found it
    // empty), so the frame may not go stale and completes once the rest
    // comes. Frame 1 is handed over the same way, and after the idle
    // while the reading side says it found the socket empty: then it
    // times out.
    let mem = HostMemory::new(ring_bytes(8, 8192).unwrap()).unwrap();
    let ring = FrameRing::new(Box::new(mem), 8, 8192, OverrunPolicy::Every).unwrap();
    let mut rd = ring.reader().unwrap();
    let reassembly = crate::ingest::ReassemblyConfig { frame_timeout_ms: 2, ..Default::default() };
    let mut r = Reassembler::new(reassembly, ring.writer().unwrap(), Arc::default());
    let counters = Arc::clone(r.counters());
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let fd = rx.as_raw_fd();
    // Arrival times from the kernel, as the receiver asks for them.
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
    let stage =
        AssemblyStage { allow: &AllowList::default(), counters: &counters, local: LOCAL, sockets: &[fd] };
    let (mut reading, assembling) = handoff::pool(1, 2, 2);
    let reading = reading.pop().unwrap();
    // Hands over the next `want` datagrams waiting in the socket.
    let hand_over = |reading: &ReadingSide, want: usize| {
        let mut batch = reading.free_batch(Duration::from_secs(5)).unwrap().expect("a free batch");
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut count = batch.recv(fd).unwrap();
        while count == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            count = batch.recv(fd).unwrap();
        }
        assert_eq!(count, want);
        reading.hand_over(batch, count, clock::realtime_ns()).unwrap();
    };
    let idle = Duration::from_millis(20);
    std::thread::scope(|scope| {
        let (stage, r) = (&stage, &mut r);
        scope.spawn(move || stage.run(&assembling, r, None, Duration::ZERO, Duration::from_millis(1)));
        let (first, frame) = frame_datagrams(6000, 1048, 0);
        for d in &first {
            tx.send_to(d, rx.local_addr().unwrap()).unwrap();
        }
        hand_over(&reading, 2);
        std::thread::sleep(idle);
        assert_eq!(counters.snapshot().frames_timed_out, 0, "frame 0 went stale by the clock");
        hand_over(&reading, 2);
        hand_over(&reading, first.len() - 4);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counters.snapshot().frames_complete == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let slot = rd.claim().expect("frame 0 was published");
        assert_eq!((slot.header.frame_seq, slot.header.flags), (0, SLOT_COMPLETE));
        assert!(slot.payload == &frame[..], "frame 0's payload");
        let claimed = slot.seq;
        rd.finish(claimed);

        let (second, _) = frame_datagrams(6000, 1048, 1);
        for d in &second[..2] {
            tx.send_to(d, rx.local_addr().unwrap()).unwrap();
        }
        hand_over(&reading, 2);
        std::thread::sleep(idle);
        reading.mark_drained(clock::realtime_ns());
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while counters.snapshot().frames_timed_out == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        drop(reading);
    });
    let s = counters.snapshot();
    assert_eq!((s.frames_complete, s.frames_timed_out, s.frames_incomplete), (1, 1, 1), "{s:?}");
    let slot = rd.claim().expect("frame 1 was published");
    assert_eq!((slot.header.frame_seq, slot.header.flags & SLOT_COMPLETE), (1, 0));
}

/// Two reading sides' sockets and an assembly stage over them, as
/// `ingest.reading_threads = 2` has: datagrams go to either socket as
/// the test says, and reach the stage when a side hands them over.
struct TwoReaders {
    sockets: [std::net::UdpSocket; 2],
    tx: std::net::UdpSocket,
    fds: [RawFd; 2],
    allow: AllowList,
    counters: Arc<IngestCounters>,
    reader: RingReader,
}

impl TwoReaders {
    /// The sockets, and the reassembler the stage is to feed.
    fn new() -> (Self, Reassembler) {
        let mem = HostMemory::new(ring_bytes(8, 16384).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), 8, 16384, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        let reassembler = Reassembler::new(Default::default(), ring.writer().unwrap(), Arc::default());
        let counters = Arc::clone(reassembler.counters());
        let socket = || {
            let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            set_int_option(s.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1).unwrap();
            s
        };
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let sockets = [socket(), socket()];
        // The kernel turns receive stamping on a moment after the first
        // socket asks (until then a datagram is stamped when it is read).
        std::thread::sleep(Duration::from_millis(20));
        let fds = [sockets[0].as_raw_fd(), sockets[1].as_raw_fd()];
        (TwoReaders { sockets, tx, fds, allow: AllowList::default(), counters, reader }, reassembler)
    }

    /// The assembly stage over both sockets.
    fn stage(&self) -> AssemblyStage<'_> {
        AssemblyStage { allow: &self.allow, counters: &self.counters, local: LOCAL, sockets: &self.fds }
    }

    /// Sends `datagrams` in order, each to the socket `to` names.
    fn send(&self, datagrams: &[Vec<u8>], to: impl Fn(usize) -> usize) {
        for (i, d) in datagrams.iter().enumerate() {
            self.tx.send_to(d, self.sockets[to(i)].local_addr().unwrap()).unwrap();
        }
    }

    /// Side `r` reads the `want` datagrams waiting in its socket and
    /// hands them over, then says it found its socket empty on that
    /// read (it came back short), as a reading thread does.
    fn hand_over(&self, side: &ReadingSide, r: usize, want: usize) {
        let mut batch = side.free_batch(Duration::from_secs(5)).unwrap().expect("a free batch");
        assert!(want < batch.buffers(), "the read comes back short");
        let fd = self.sockets[r].as_raw_fd();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut started = clock::realtime_ns();
        let mut count = batch.recv(fd).unwrap();
        while count < want && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
            assert_eq!(count, 0, "the batch is read in one go");
            started = clock::realtime_ns();
            count = batch.recv(fd).unwrap();
        }
        assert_eq!(count, want);
        side.hand_over(batch, count, clock::realtime_ns()).unwrap();
        side.mark_drained(started);
    }

    fn accepted(&self) -> u64 {
        self.counters.snapshot().packets_accepted
    }

    fn wait_for_accepted(&self, want: u64) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while self.accepted() < want && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(self.accepted(), want);
    }
}

#[test]
fn datagrams_of_several_readers_are_assembled_in_arrival_order() {
    // One frame's datagrams go to the two sockets in turn; reader 1
    // hands its half over first. Reader 0 is reading (not parked) and
    // has not said its socket was empty: nothing may be assembled
    // before its half comes, and then all of it in the order sent.
    let (mut two, mut r) = TwoReaders::new();
    let (datagrams, frame) = frame_datagrams(8000, 1048, 0);
    assert_eq!(datagrams.len(), 8);
    let tap = Shared::default();
    let seen = tap.clone();
    let stage = two.stage();
    let (reading, assembling) = handoff::pool(2, 2, 8);
    std::thread::scope(|scope| {
        let r = &mut r;
        scope.spawn(move || {
            let mut tap = tap;
            stage.run(&assembling, r, Some(&mut tap), Duration::ZERO, Duration::from_secs(2))
        });
        reading[0].unpark();
        two.send(&datagrams, |i| i % 2);
        two.hand_over(&reading[1], 1, 4);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(two.accepted(), 0, "assembled before the reader that may hold earlier ones handed over");
        two.hand_over(&reading[0], 0, 4);
        two.wait_for_accepted(8);
        assert_eq!(*seen.0.lock().unwrap(), datagrams, "in the order they arrived");

        // Reader 0 parked with its socket empty holds nothing: reader
        // 1's datagrams go on at once.
        reading[0].park();
        let (second, _) = frame_datagrams(3000, 1048, 1);
        two.send(&second, |_| 1);
        let handed = std::time::Instant::now();
        two.hand_over(&reading[1], 1, second.len());
        let mut accepted = 8 + second.len() as u64;
        two.wait_for_accepted(accepted);
        assert!(handed.elapsed() < Duration::from_secs(1), "waited for a parked reader");

        // Nor does one whose socket holds only what arrived later: the
        // third frame's datagrams reach reader 1 first, then one
        // reaches reader 0, which stays parked.
        let (third, _) = frame_datagrams(3000, 1048, 2);
        two.send(&third, |i| if i + 1 == third.len() { 0 } else { 1 });
        let handed = std::time::Instant::now();
        two.hand_over(&reading[1], 1, third.len() - 1);
        accepted += third.len() as u64 - 1;
        two.wait_for_accepted(accepted);
        assert!(handed.elapsed() < Duration::from_secs(1), "waited for a reader holding a later datagram");
        reading[0].unpark();
        two.hand_over(&reading[0], 0, 1);
        two.wait_for_accepted(accepted + 1);
        assert_eq!(two.counters.snapshot().frames_complete, 3);
        drop(reading);
    });
    let slot = two.reader.claim().expect("frame 0 was published");
    assert_eq!((slot.header.frame_seq, slot.header.flags), (0, SLOT_COMPLETE));
    assert!(slot.payload == &frame[..]);
}

#[test]
fn a_reader_that_is_reading_holds_the_others_up_until_it_says_it_holds_nothing_earlier() {
    // Reader 0 is reading (kept off its core, say) and hands nothing
    // over: reader 1's datagrams wait for it however long that takes,
    // and go on once it finds its socket empty on a read that began
    // after they arrived. Going on without it would publish its frames
    // out of order.
    let (two, mut r) = TwoReaders::new();
    let stage = two.stage();
    let (reading, assembling) = handoff::pool(2, 2, 8);
    std::thread::scope(|scope| {
        let r = &mut r;
        scope.spawn(move || stage.run(&assembling, r, None, Duration::ZERO, Duration::from_millis(2)));
        reading[0].unpark();
        let (datagrams, _) = frame_datagrams(3000, 1048, 0);
        two.send(&datagrams, |_| 1);
        two.hand_over(&reading[1], 1, datagrams.len());
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(two.accepted(), 0, "went on without the reader that is reading");
        reading[0].mark_drained(clock::realtime_ns());
        two.wait_for_accepted(datagrams.len() as u64);
        drop(reading);
    });
    assert_eq!(two.counters.snapshot().frames_complete, 1);
}

#[test]
fn the_assembly_thread_runs_its_start_first_and_a_failed_start_stops_the_receiver() {
    let ran_on = Arc::new(std::sync::Mutex::new(None));
    let record = Arc::clone(&ran_on);
    let split = Split::start(UdpConfig::default(), Default::default(), 8, 8192, move |r| {
        assert!(r.on_assembly_thread_start(Box::new(move || {
            *record.lock().unwrap() = std::thread::current().name().map(str::to_owned);
            Ok(())
        })));
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while ran_on.lock().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    split.stop().1.unwrap();
    assert_eq!(ran_on.lock().unwrap().as_deref(), Some(ASSEMBLY_THREAD_NAME));

    let split = Split::start(UdpConfig::default(), Default::default(), 8, 8192, |r| {
        r.on_assembly_thread_start(Box::new(|| Err("core 9999 is not allowed".into())));
    });
    let result = split.handle.join().unwrap();
    let message = result.unwrap_err().to_string();
    assert!(message.contains("core 9999 is not allowed") && message.contains("assembly"), "{message}");

    // Without the key there is no thread to start.
    let (r, _rd) = reassembler();
    let mut receiver =
        UdpReceiver::bind(&UdpConfig { bind: "127.0.0.1:0".into(), ..Default::default() }, r).unwrap();
    assert!(!receiver.has_assembly_thread());
    assert!(!receiver.on_assembly_thread_start(Box::new(|| Ok(()))));
    assert_eq!(receiver.on_reading_thread_start(Arc::new(|_| Ok(()))), 0);
    assert_eq!(receiver.reading_threads(), 1);
}

#[test]
fn each_further_reading_thread_runs_its_start_first_and_a_failed_start_stops_the_receiver() {
    let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = Arc::clone(&ran);
    let cfg = UdpConfig { reading_threads: 3, ..UdpConfig::default() };
    let split = Split::start(cfg.clone(), Default::default(), 8, 8192, move |r| {
        let start: OnReadingThreadStart = Arc::new(move |index| {
            let name = std::thread::current().name().map(str::to_owned);
            record.lock().unwrap().push((index, name));
            Ok(())
        });
        assert_eq!(r.on_reading_thread_start(start), 2);
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while ran.lock().unwrap().len() < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(1));
    }
    split.stop().1.unwrap();
    let mut ran = ran.lock().unwrap().clone();
    ran.sort();
    let name = |i| Some(format!("{READING_THREAD_NAME}{i}"));
    assert_eq!(ran, vec![(1, name(1)), (2, name(2))]);

    let split = Split::start(cfg, Default::default(), 8, 8192, |r| {
        r.on_reading_thread_start(Arc::new(|index| {
            if index == 2 { Err("core 9999 is not allowed".into()) } else { Ok(()) }
        }));
    });
    let result = split.handle.join().unwrap();
    let message = result.unwrap_err().to_string();
    assert!(
        message.contains("core 9999 is not allowed") && message.contains("reading thread 2"),
        "{message}"
    );
}
