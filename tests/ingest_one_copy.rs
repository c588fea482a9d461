//! One-copy receive (`ingest.receive_into_slots`) against the copying
//! receiver over real loopback sockets: the same traffic (several streams,
//! frame and datagram sizes, GSO-coalesced sends, lost, duplicated and
//! reordered datagrams, malformed ones) sent to one receiver of each kind
//! gives byte-identical frames, flags and counters.

use frameloop::ingest::{
    IngestCounters, IngestSnapshot, Reassembler, ReassemblyConfig, ReceiveIntoSlots, UdpConfig, UdpReceiver,
};
use frameloop::ring::layout::ring_bytes;
use frameloop::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader, SlotHeader};
use frameloop::wire::native;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const SLOTS: usize = 256;
const SLOT_BYTES: usize = 65536;

struct Receiver {
    addr: SocketAddr,
    counters: Arc<IngestCounters>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    reader: RingReader,
}

impl Receiver {
    fn start(one_copy: bool) -> Self {
        Self::start_after(one_copy, Arc::new(AtomicBool::new(true)))
    }

    /// A receiver whose socket is bound at once but which reads it only
    /// once `go` is set: what was sent meanwhile waits in the socket.
    fn start_after(one_copy: bool, go: Arc<AtomicBool>) -> Self {
        let cfg = UdpConfig {
            bind: "127.0.0.1:0".into(),
            recv_buffer_bytes: 4 << 20,
            receive_into_slots: if one_copy { ReceiveIntoSlots::On } else { ReceiveIntoSlots::Off },
            // Only arrival order decides what is published incomplete.
            reassembly: ReassemblyConfig { frame_timeout_ms: 60_000, ..ReassemblyConfig::default() },
            ..UdpConfig::default()
        };
        let mem = HostMemory::new(ring_bytes(SLOTS, SLOT_BYTES).unwrap()).unwrap();
        let ring = FrameRing::new(Box::new(mem), SLOTS, SLOT_BYTES, OverrunPolicy::Every).unwrap();
        let reader = ring.reader().unwrap();
        let reassembler = Reassembler::new(cfg.reassembly.clone(), ring.writer().unwrap(), Arc::default());
        let mut receiver = UdpReceiver::bind(&cfg, reassembler).unwrap();
        assert!(receiver.gro_active(), "these tests need UDP GRO on loopback");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let (addr, counters) = (receiver.local_addr(), Arc::clone(receiver.counters()));
        let thread = std::thread::spawn(move || {
            while !go.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1));
            }
            receiver.run(&flag).unwrap()
        });
        Receiver { addr, counters, stop, thread: Some(thread), reader }
    }

    fn wait_for_datagrams(&self, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.counters.snapshot().datagrams < n {
            assert!(Instant::now() < deadline, "receiver stuck: {:?}", self.counters.snapshot());
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Stops the receiver (which publishes what is in flight) and returns
    /// every frame (header fields that do not depend on time, payload) and
    /// the counters.
    fn finish(mut self) -> (Vec<(SlotHeader, Vec<u8>)>, IngestSnapshot) {
        self.stop.store(true, Ordering::Release);
        self.thread.take().unwrap().join().unwrap();
        let mut out = Vec::new();
        while let Some(slot) = self.reader.claim() {
            let seq = slot.seq;
            let h = slot.header;
            let kept = SlotHeader {
                frame_seq: h.frame_seq,
                stream_id: h.stream_id,
                flags: h.flags,
                payload_len: h.payload_len,
                packets_expected: h.packets_expected,
                packets_received: h.packets_received,
                ring_seq: h.ring_seq,
                ..SlotHeader::default()
            };
            out.push((kept, slot.payload[..h.payload_len as usize].to_vec()));
            self.reader.finish(seq);
        }
        (out, self.counters.snapshot())
    }
}

/// xorshift64*: the traffic is a pure function of the seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// Sends `datagrams` as one GSO send (equal sizes but the last), or alone.
fn send(sock: &UdpSocket, to: SocketAddr, datagrams: &[Vec<u8>]) {
    if datagrams.len() == 1 {
        sock.send_to(&datagrams[0], to).unwrap();
        return;
    }
    let segment = datagrams[0].len() as libc::c_int;
    let set = |v: libc::c_int| {
        // SAFETY: UDP_SEGMENT takes one c_int; the length passed is its size.
        let rc = unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                (&v as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "UDP_SEGMENT: {}", std::io::Error::last_os_error());
    };
    set(segment);
    sock.send_to(&datagrams.concat(), to).unwrap();
    set(0);
}

/// How the traffic of a seed varies.
#[derive(Clone, Copy)]
enum Kind {
    /// Three streams in random order, every frame its own size and cut.
    Mixed,
    /// Two streams taking turns, full 64 KiB frames, one cut per seed (a
    /// sensor's steady stream), now and then a frame with a lost, duplicated
    /// or swapped datagram.
    Steady,
}

/// The traffic of one seed: sends of one or more datagrams.
fn traffic(seed: u64, kind: Kind) -> Vec<Vec<Vec<u8>>> {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut datagrams: Vec<Vec<u8>> = Vec::new();
    let mut next_seq = [0u64; 3];
    let steady_payload = [1424u32, 8924][seed as usize % 2];
    for f in 0..60 {
        let stream = match kind {
            Kind::Mixed => rng.below(3) as usize,
            Kind::Steady => f % 2,
        };
        let seq = next_seq[stream];
        next_seq[stream] += 1;
        let len = match (kind, rng.below(4)) {
            (Kind::Steady, _) => 65536,
            (_, 0) => 1 + rng.below(3000) as usize,
            (_, 1) => 65536,
            _ => 1 + rng.below(65536) as usize,
        };
        let payload = match kind {
            Kind::Mixed => [1424u32, 8924, 500, 3000][rng.below(4) as usize],
            Kind::Steady => steady_payload,
        };
        let frame: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let mut packets = native::encode_frame(stream as u32, seq, &frame, payload, 1000 + seq);
        // A datagram lost, duplicated or swapped shifts every later datagram
        // of its receive buffer off its predicted place: rare on a sensor link.
        let rare = |rng: &mut Rng, percent| match kind {
            Kind::Mixed => rng.chance(percent),
            Kind::Steady => rng.below(100 * percent) == 0,
        };
        if rare(&mut rng, 15) && packets.len() > 1 {
            let i = rng.below(packets.len() as u64) as usize;
            packets.remove(i);
        }
        if rare(&mut rng, 10) {
            let i = rng.below(packets.len() as u64) as usize;
            packets.insert(i, packets[i].clone());
        }
        if rare(&mut rng, 10) && packets.len() > 2 {
            let i = rng.below(packets.len() as u64 - 1) as usize;
            packets.swap(i, i + 1);
        }
        if matches!(kind, Kind::Mixed) && rng.chance(8) {
            let mut bad = packets[0].clone();
            match rng.below(3) {
                0 => bad[0] ^= 0xFF,
                1 => bad.truncate(native::HEADER_LEN + 1),
                _ => bad[6] = 64,
            }
            packets.insert(rng.below(packets.len() as u64) as usize, bad);
        }
        datagrams.extend(packets);
    }
    // Group runs of equal-size datagrams (the last of a run may be shorter)
    // into GSO sends of at most 64 KiB.
    let mut sends: Vec<Vec<Vec<u8>>> = Vec::new();
    for d in datagrams {
        let joins = sends.last().is_some_and(|s: &Vec<Vec<u8>>| {
            let size = s[0].len();
            let total: usize = s.iter().map(Vec::len).sum();
            s.last().unwrap().len() == size && d.len() <= size && total + d.len() <= 65000 && s.len() < 60
        });
        if joins && (matches!(kind, Kind::Steady) || !rng.chance(10)) {
            sends.last_mut().unwrap().push(d);
        } else {
            sends.push(vec![d]);
        }
    }
    sends
}

/// Sends every seed's traffic to a copying and a one-copy receiver and
/// checks they publish the same frames and count the same; returns the
/// payloads the kernel placed and those accepted, over all seeds.
///
/// The sender waits for both receivers to have read everything after every
/// `burst` sends: a paced sensor (`1`: every receive finds one buffer) or
/// bursts the receiver has to catch up with (how many buffers one receive
/// finds then depends on the scheduler).
fn compare(kind: Kind, seeds: std::ops::RangeInclusive<u64>, burst: usize) -> (u64, u64) {
    let (mut placed, mut accepted) = (0, 0);
    for seed in seeds {
        let sends = traffic(seed, kind);
        let copying = Receiver::start(false);
        let one_copy = Receiver::start(true);
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut sent = 0u64;
        for (i, s) in sends.iter().enumerate() {
            send(&sock, copying.addr, s);
            send(&sock, one_copy.addr, s);
            sent += s.len() as u64;
            if i % burst == burst - 1 {
                copying.wait_for_datagrams(sent);
                one_copy.wait_for_datagrams(sent);
            }
        }
        copying.wait_for_datagrams(sent);
        one_copy.wait_for_datagrams(sent);
        let (want, want_counts) = copying.finish();
        let (got, got_counts) = one_copy.finish();
        assert_eq!(want_counts.datagrams, sent, "seed {seed}");
        assert!(want.len() > 30, "seed {seed}: only {} frames published", want.len());
        assert_eq!(got.len(), want.len(), "seed {seed}: frames published");
        for (i, ((gh, gp), (wh, wp))) in got.iter().zip(&want).enumerate() {
            assert_eq!(gh, wh, "seed {seed}: header of frame {i}");
            assert!(gp == wp, "seed {seed}: payload of frame {i} ({wh:?}) differs");
        }
        assert_eq!(want_counts.placed_by_kernel, 0, "seed {seed}: the copying receiver placed nothing");
        assert_eq!(
            IngestSnapshot { placed_by_kernel: 0, ..got_counts },
            want_counts,
            "seed {seed}: counters"
        );
        placed += got_counts.placed_by_kernel;
        accepted += got_counts.packets_accepted;
    }
    (placed, accepted)
}

#[test]
fn mixed_traffic_gives_the_copying_receivers_frames_and_counters() {
    let (placed, accepted) = compare(Kind::Mixed, 1..=6, 16);
    assert!(placed > 0, "no payload was placed by the kernel ({accepted} accepted)");
}

#[test]
fn a_steady_stream_is_placed_by_the_kernel() {
    // Paced, so that what is placed does not depend on the scheduler: only
    // the first frame of a seed (nothing to predict from yet) and the frames
    // with a lost, duplicated or swapped datagram may be copied.
    let (placed, accepted) = compare(Kind::Steady, 1..=4, 1);
    assert!(placed * 100 >= accepted * 95, "only {placed} of {accepted} payloads placed by the kernel");
}

#[test]
fn datagrams_that_arrived_apart_and_wait_in_the_socket_are_placed_by_the_kernel() {
    // A paced sensor's datagrams arrive one by one and GRO leaves them
    // apart, so a receiver that fell behind finds one datagram in each
    // receive buffer. Plans of whole GRO buffers put the second buffer's
    // datagram where the eighth was expected and copied it (and every one
    // after it) again; plans shaped after the last receive place them all.
    let mut rng = Rng(7);
    let mut datagrams = Vec::new();
    for seq in 0..20u64 {
        let frame: Vec<u8> = (0..65536).map(|_| rng.next() as u8).collect();
        datagrams.extend(native::encode_frame(0, seq, &frame, 8924, 1000 + seq));
    }
    let go = Arc::new(AtomicBool::new(false));
    let copying = Receiver::start_after(false, Arc::clone(&go));
    let one_copy = Receiver::start_after(true, Arc::clone(&go));
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    for d in &datagrams {
        sock.send_to(d, copying.addr).unwrap();
        sock.send_to(d, one_copy.addr).unwrap();
    }
    go.store(true, Ordering::Release);
    let sent = datagrams.len() as u64;
    copying.wait_for_datagrams(sent);
    one_copy.wait_for_datagrams(sent);
    let (want, want_counts) = copying.finish();
    let (got, got_counts) = one_copy.finish();
    assert_eq!((want.len(), got.len()), (20, 20), "frames published");
    for (i, ((gh, gp), (wh, wp))) in got.iter().zip(&want).enumerate() {
        assert_eq!(gh, wh, "header of frame {i}");
        assert!(gp == wp, "payload of frame {i} differs");
    }
    assert_eq!(IngestSnapshot { placed_by_kernel: 0, ..got_counts }, want_counts, "counters");
    assert_eq!(got_counts.gro_segments, 0, "the datagrams were coalesced: {got_counts:?}");
    // Only the first receive call has nothing to predict from (a batch of
    // at most UdpConfig::default().batch buffers); every later one places.
    let batch = UdpConfig::default().batch as u64;
    assert!(
        got_counts.placed_by_kernel + batch >= sent,
        "{} of {sent} payloads placed by the kernel",
        got_counts.placed_by_kernel
    );
}
