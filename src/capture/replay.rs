//! `frameloop replay`: the UDP datagrams of a capture, filtered by
//! destination port and native stream id, either sent to a running
//! appliance over a socket (original timing, scaled, or as fast as
//! possible) or fed in-process into reassembly (native or RFC 4175) and the
//! CPU operator chain.
//!
//! A UDP payload that starts with a native datagram is split into the
//! native datagrams it holds back to back, each header saying where the
//! next begins: tcpdump records a UDP GSO send as one large datagram, as
//! GRO hands it to the receiver. Bytes after the last datagram that parse
//! as none are counted and reported, not replayed. RTP payloads are never
//! split (one RTP packet per datagram).
//!
//! Pacing bounds each wait by `--max-gap-ms`, so a capture whose clock
//! jumps does not stall the replay; waits end early when a stop is raised.
//!
//! In-process replay is deterministic: the capture's own timestamps are the
//! receive times (no clock is read), the ring is drained after every
//! datagram, so replaying a capture twice gives identical results.

use super::CaptureError;
use super::net::{SkipReason, UdpView, decode_udp};
use super::reader::CaptureReader;
use crate::clock;
use crate::config::RingConfig;
use crate::ingest::{IngestCounters, Reassembler, ReassemblyConfig};
use crate::ops::{ChainOutput, CpuChain, OpSpec};
use crate::ring::layout::ring_bytes;
use crate::ring::{FrameRing, HostMemory, OverrunPolicy, RingReader};
use crate::rtp::{RtpAssembler, RtpSettings};
use crate::wire::{native, rtp4175};
use std::io::{IsTerminal, Read, Write};
use std::net::{SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Arguments of `frameloop replay`.
#[derive(Debug, Clone)]
pub struct ReplayArgs {
    /// pcap or pcapng capture (from tcpdump, tshark, Wireshark or `frameloop record`).
    pub file: PathBuf,
    /// Send the datagrams to a running appliance at this address; without it
    /// the capture is replayed in-process into reassembly and the operator chain.
    pub to: Option<SocketAddr>,
    /// Timing factor: 1 keeps the capture's timing, 4 replays four times faster.
    pub speed: f64,
    /// Send as fast as possible, ignoring the capture's timing.
    pub max_rate: bool,
    /// Replay only datagrams to this destination port (repeatable).
    pub ports: Vec<u16>,
    /// Replay only native datagrams of this stream id (repeatable).
    pub streams: Vec<u32>,
    /// In-process: the datagrams are RFC 4175 RTP video (geometry from the config's `[rtp]` section).
    pub rtp: bool,
    /// Print the progress line even when stderr is not a terminal.
    pub progress: bool,
    /// Longest wait between two datagrams when pacing, in milliseconds:
    /// longer gaps in the capture's timestamps (a clock jump, a pause while
    /// recording) are shortened to this and counted in the summary.
    pub max_gap_ms: u64,
}

impl ReplayArgs {
    /// Arguments for replaying `file` with defaults (original timing, no filters).
    pub fn new(file: impl Into<PathBuf>) -> Self {
        Self {
            file: file.into(),
            to: None,
            speed: 1.0,
            max_rate: false,
            ports: Vec::new(),
            streams: Vec::new(),
            rtp: false,
            progress: false,
            max_gap_ms: Self::DEFAULT_MAX_GAP_MS,
        }
    }

    /// Default of `--max-gap-ms`.
    pub const DEFAULT_MAX_GAP_MS: u64 = 1000;

    fn check(&self) -> Result<(), CaptureError> {
        if !(self.speed.is_finite() && self.speed > 0.0) {
            return Err(CaptureError::BadArgument {
                arg: "--speed",
                message: format!(
                    "{} must be a positive number (1 = original timing); use --max-rate for no timing",
                    self.speed
                ),
            });
        }
        Ok(())
    }
}

/// Which datagrams a replay keeps.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatagramFilter {
    /// Destination ports kept; empty keeps all.
    pub ports: Vec<u16>,
    /// Native stream ids kept; empty keeps all (non-native datagrams too).
    pub streams: Vec<u32>,
}

impl DatagramFilter {
    /// `Ok` when the datagram is kept, otherwise the filter that skipped it.
    pub fn check(&self, udp: &UdpView<'_>) -> Result<(), SkipReason> {
        if !self.ports.is_empty() && !self.ports.contains(&udp.dst.port()) {
            return Err(SkipReason::FilteredPort);
        }
        if !self.streams.is_empty() {
            match native::parse(udp.payload) {
                Ok((h, _)) if self.streams.contains(&h.stream_id) => {}
                _ => return Err(SkipReason::FilteredStream),
            }
        }
        Ok(())
    }
}

/// The native datagrams of one UDP payload, back to back as a GSO send
/// leaves them, and the bytes after the last one that parse as none.
struct NativeDatagrams<'a> {
    rest: &'a [u8],
}

impl<'a> NativeDatagrams<'a> {
    /// `None` when the payload does not start with a native datagram (RTP,
    /// or something else): it is then replayed whole.
    fn of(payload: &'a [u8]) -> Option<Self> {
        native::parse(payload).ok().map(|_| Self { rest: payload })
    }

    /// Bytes left that are no native datagram (valid once the iterator is exhausted).
    fn leftover(&self) -> usize {
        self.rest.len()
    }
}

impl<'a> Iterator for NativeDatagrams<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        let (_, payload) = native::parse(self.rest).ok()?;
        // The payload is a subslice of `rest`, so it ends inside it.
        let end = (payload.as_ptr() as usize - self.rest.as_ptr() as usize) + payload.len();
        debug_assert!(end > 0 && end <= self.rest.len());
        let (datagram, rest) = self.rest.split_at(end);
        self.rest = rest;
        Some(datagram)
    }
}

/// Counts frames passing by in datagrams without assembling them: a native
/// frame when `(stream, frame_seq)` changes, an RTP frame at each marker bit.
#[derive(Debug, Default)]
struct FrameBoundaries {
    last_native: Option<(u32, u64)>,
    frames: u64,
}

impl FrameBoundaries {
    fn observe(&mut self, payload: &[u8]) {
        if let Ok((h, _)) = native::parse(payload) {
            if self.last_native != Some((h.stream_id, h.frame_seq)) {
                self.last_native = Some((h.stream_id, h.frame_seq));
                self.frames += 1;
            }
        } else if rtp4175::parse_rtp(payload).is_ok_and(|(h, _)| h.marker) {
            self.frames += 1;
        }
    }
}

/// One frame the in-process replay processed.
#[derive(Debug, Clone, PartialEq)]
pub struct ProcessedFrame {
    pub frame_seq: u64,
    pub stream_id: u32,
    /// `SLOT_*` flags.
    pub flags: u32,
    pub payload_len: u32,
    pub packets_expected: u32,
    pub packets_received: u32,
    /// FNV-1a 64 of the payload bytes.
    pub payload_digest: u64,
    /// What the operator chain computed.
    pub output: ChainOutput,
}

/// FNV-1a, 64 bit: a stable digest of frame payloads for comparisons.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ *b as u64).wrapping_mul(0x0100_0000_01b3))
}

/// The result of a replay.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReplaySummary {
    /// Packets read from the capture.
    pub packets: u64,
    /// UDP datagrams replayed (sent, or fed in-process).
    pub datagrams: u64,
    /// Their payload bytes.
    pub bytes: u64,
    /// Frames: assembled and processed in-process, or seen passing by when sending.
    pub frames: u64,
    /// Packets skipped, by reason (only non-zero ones).
    pub skipped: Vec<(SkipReason, u64)>,
    /// Datagrams the socket refused to send.
    pub send_errors: u64,
    /// Capture time from the first to the last replayed datagram (ns).
    pub capture_span_ns: u64,
    /// Wall time of the replay (ns).
    pub wall_ns: u64,
    /// In-process: every processed frame in order.
    pub processed: Vec<ProcessedFrame>,
    /// In-process: non-zero reassembly counters (name, value).
    pub ingest_counters: Vec<(&'static str, u64)>,
    /// UDP payloads whose native datagrams were followed by bytes that are
    /// no native datagram, and those bytes (not replayed).
    pub unparsed_tails: u64,
    pub unparsed_tail_bytes: u64,
    /// Pacing waits shortened to `--max-gap-ms`, and the longest such gap
    /// of the capture's timestamps (ns, after `--speed`).
    pub gaps_shortened: u64,
    pub longest_gap_ns: u64,
    /// The error that ended the replay early (truncated or corrupt capture);
    /// everything before it was replayed.
    pub ended_early: Option<String>,
}

impl ReplaySummary {
    /// Packets skipped for `reason`.
    pub fn skipped(&self, reason: SkipReason) -> u64 {
        self.skipped.iter().find(|(r, _)| *r == reason).map_or(0, |(_, n)| *n)
    }

    /// The human-readable summary printed at the end of `frameloop replay`.
    pub fn render(&self) -> String {
        let secs = self.wall_ns as f64 / 1e9;
        let mut s = format!(
            "replay: {} frames, {} datagrams ({:.1} MB), {} packets read, in {:.3} s (capture span {:.3} s)\n",
            self.frames,
            self.datagrams,
            self.bytes as f64 / 1e6,
            self.packets,
            secs,
            self.capture_span_ns as f64 / 1e9
        );
        let skipped: u64 = self.skipped.iter().map(|(_, n)| n).sum();
        s.push_str(&format!("skipped packets: {skipped}"));
        for (r, n) in &self.skipped {
            s.push_str(&format!(", {} {n}", r.name()));
        }
        s.push('\n');
        if self.send_errors > 0 {
            s.push_str(&format!("send errors: {}\n", self.send_errors));
        }
        if self.unparsed_tails > 0 {
            s.push_str(&format!(
                "warning: {} bytes after the native datagrams of {} UDP payloads are no native datagram; not replayed\n",
                self.unparsed_tail_bytes, self.unparsed_tails
            ));
        }
        if self.gaps_shortened > 0 {
            s.push_str(&format!(
                "pacing: {} gaps shortened to --max-gap-ms, the longest {:.3} s\n",
                self.gaps_shortened,
                self.longest_gap_ns as f64 / 1e9
            ));
        }
        if !self.ingest_counters.is_empty() {
            let parts: Vec<String> = self.ingest_counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
            s.push_str(&format!("reassembly: {}\n", parts.join(", ")));
        }
        if let Some(e) = &self.ended_early {
            s.push_str(&format!("ended early: {e}\n"));
        }
        s
    }
}

/// What an in-process replay assembles and runs.
#[derive(Debug, Clone)]
pub struct InProcessSetup {
    pub ring: RingConfig,
    pub chain: Vec<OpSpec>,
    pub reassembly: ReassemblyConfig,
    /// RFC 4175 geometry when the datagrams are RTP video; native datagrams otherwise.
    pub rtp: Option<RtpSettings>,
}

impl InProcessSetup {
    /// Ring, chain and reassembly settings of a config; `rtp` when replaying RTP video.
    pub fn from_config(config: &crate::config::Config, rtp: Option<RtpSettings>) -> Self {
        Self {
            ring: config.ring.clone(),
            chain: config.chain.clone(),
            reassembly: config.ingest.reassembly.clone(),
            rtp,
        }
    }
}

enum Assembly {
    Native(Box<Reassembler>),
    Rtp(Box<RtpAssembler>),
}

/// Reassembly and the operator chain in one thread, driven by capture times.
pub struct InProcessPipeline {
    assembly: Assembly,
    reader: RingReader,
    chain: CpuChain,
    processed: Vec<ProcessedFrame>,
}

impl InProcessPipeline {
    /// Builds the ring, the assembler and the chain.
    pub fn new(setup: &InProcessSetup) -> Result<Self, CaptureError> {
        let setup_err = |e: String| CaptureError::Setup(e);
        let slot_bytes = match &setup.rtp {
            Some(r) => setup.ring.slot_bytes.max(r.geometry.frame_bytes()),
            None => setup.ring.slot_bytes,
        };
        let slots = setup.ring.slots.max(2);
        let bytes = ring_bytes(slots, slot_bytes).ok_or_else(|| {
            setup_err("ring.slots x ring.slot_bytes overflows; use fewer or smaller slots".into())
        })?;
        let mem = HostMemory::new(bytes).map_err(|e| setup_err(e.to_string()))?;
        let ring = FrameRing::new(Box::new(mem), slots, slot_bytes, OverrunPolicy::Every)
            .map_err(|e| setup_err(e.to_string()))?;
        let writer = ring.writer().ok_or_else(|| setup_err("ring writer taken".into()))?;
        let reader = ring.reader().ok_or_else(|| setup_err("ring reader taken".into()))?;
        let assembly = match setup.rtp {
            Some(r) => {
                Assembly::Rtp(Box::new(RtpAssembler::new(r, writer).map_err(|e| setup_err(e.to_string()))?))
            }
            None => Assembly::Native(Box::new(Reassembler::new(
                setup.reassembly.clone(),
                writer,
                Arc::new(IngestCounters::default()),
            ))),
        };
        let chain = CpuChain::new(&setup.chain, slot_bytes)
            .map_err(|errs| setup_err(errs.iter().map(|e| e.to_string()).collect::<Vec<_>>().join("; ")))?;
        Ok(Self { assembly, reader, chain, processed: Vec::new() })
    }

    /// Feeds one datagram received at `rx_ns` and processes every frame it completes.
    pub fn on_datagram(&mut self, payload: &[u8], rx_ns: u64) {
        match &mut self.assembly {
            Assembly::Native(r) => r.on_datagram(payload, rx_ns),
            Assembly::Rtp(r) => r.on_datagram(payload, rx_ns),
        }
        self.drain();
    }

    /// Publishes what is still in flight at `now_ns` and processes it.
    pub fn flush(&mut self, now_ns: u64) {
        match &mut self.assembly {
            Assembly::Native(r) => r.flush(now_ns),
            Assembly::Rtp(r) => r.flush(now_ns),
        }
        self.drain();
    }

    fn drain(&mut self) {
        while let Some(c) = self.reader.claim() {
            let output = self.chain.run(c.payload);
            let h = c.header;
            self.processed.push(ProcessedFrame {
                frame_seq: h.frame_seq,
                stream_id: h.stream_id,
                flags: h.flags,
                payload_len: h.payload_len,
                packets_expected: h.packets_expected,
                packets_received: h.packets_received,
                payload_digest: fnv1a64(c.payload),
                output,
            });
            let seq = c.seq;
            self.reader.finish(seq);
        }
    }

    /// Frames processed so far.
    pub fn processed(&self) -> &[ProcessedFrame] {
        &self.processed
    }

    /// Non-zero reassembly counters.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        match &self.assembly {
            Assembly::Native(r) => r.counters().snapshot().iter().filter(|(_, v)| *v > 0).collect(),
            Assembly::Rtp(r) => r.counters().iter().filter(|(_, v)| *v > 0).collect(),
        }
    }

    /// Consumes the pipeline, returning every processed frame.
    pub fn into_processed(self) -> Vec<ProcessedFrame> {
        self.processed
    }
}

/// Prints the progress line on stderr at most four times a second.
struct Progress {
    enabled: bool,
    last_ns: u64,
    start_ns: u64,
    printed: bool,
}

impl Progress {
    const INTERVAL_NS: u64 = 250_000_000;

    fn new(forced: bool) -> Self {
        let now = clock::monotonic_ns();
        Self {
            enabled: forced || std::io::stderr().is_terminal(),
            last_ns: now,
            start_ns: now,
            printed: false,
        }
    }

    fn update(&mut self, frames: u64, datagrams: u64, bytes: u64) {
        if !self.enabled {
            return;
        }
        let now = clock::monotonic_ns();
        if now - self.last_ns < Self::INTERVAL_NS {
            return;
        }
        self.last_ns = now;
        let secs = ((now - self.start_ns) as f64 / 1e9).max(1e-9);
        let _ = write!(
            std::io::stderr(),
            "\rreplay: {frames} frames ({:.1}/s), {datagrams} datagrams ({:.1} MB/s)   ",
            frames as f64 / secs,
            bytes as f64 / 1e6 / secs
        );
        self.printed = true;
    }

    fn finish(&mut self) {
        if self.printed {
            let _ = writeln!(std::io::stderr());
        }
    }
}

/// Where replayed datagrams go.
enum Target {
    Socket { socket: UdpSocket, to: SocketAddr },
    InProcess(Box<InProcessPipeline>),
}

/// Replays `args.file`: to `args.to` when set, otherwise in-process with
/// `setup` (which must then be `Some`). Stops early when `stop` is raised.
pub fn replay(
    args: &ReplayArgs,
    setup: Option<&InProcessSetup>,
    stop: &AtomicBool,
) -> Result<ReplaySummary, CaptureError> {
    args.check()?;
    let reader = CaptureReader::open(&args.file)?;
    let target = match args.to {
        Some(to) => {
            let local: SocketAddr =
                if to.is_ipv4() { "0.0.0.0:0".parse().unwrap_or(to) } else { "[::]:0".parse().unwrap_or(to) };
            let socket =
                UdpSocket::bind(local).map_err(|source| CaptureError::Bind { addr: local, source })?;
            let _ = socket2::SockRef::from(&socket).set_send_buffer_size(8 << 20);
            Target::Socket { socket, to }
        }
        None => {
            let setup = setup
                .ok_or_else(|| CaptureError::Setup("no config given for the in-process replay".into()))?;
            let mut setup = setup.clone();
            if !args.rtp {
                setup.rtp = None;
            } else if setup.rtp.is_none() {
                return Err(CaptureError::BadArgument {
                    arg: "--rtp",
                    message: "needs an [rtp] section (width, height, sampling, depth or sdp) in the config"
                        .into(),
                });
            }
            Target::InProcess(Box::new(InProcessPipeline::new(&setup)?))
        }
    };
    let filter = DatagramFilter { ports: args.ports.clone(), streams: args.streams.clone() };
    run(reader, &filter, target, args, stop)
}

/// Replays every datagram of an already opened capture in-process (no
/// clock, no pacing): the deterministic core that tests use.
pub fn replay_in_process<R: Read>(
    reader: CaptureReader<R>,
    filter: &DatagramFilter,
    setup: &InProcessSetup,
) -> Result<ReplaySummary, CaptureError> {
    let target = Target::InProcess(Box::new(InProcessPipeline::new(setup)?));
    let mut args = ReplayArgs::new("");
    args.max_rate = true;
    run(reader, filter, target, &args, &AtomicBool::new(false))
}

fn run<R: Read>(
    mut reader: CaptureReader<R>,
    filter: &DatagramFilter,
    mut target: Target,
    args: &ReplayArgs,
    stop: &AtomicBool,
) -> Result<ReplaySummary, CaptureError> {
    let mut summary = ReplaySummary::default();
    let mut skipped = [0u64; SkipReason::ALL.len()];
    let mut boundaries = FrameBoundaries::default();
    let mut progress = Progress::new(args.progress);
    let start_mono = clock::monotonic_ns();
    let (mut first_ts, mut last_ts) = (None::<u64>, 0u64);
    let max_gap_ns = args.max_gap_ms.saturating_mul(1_000_000);
    // Pacing: the previous datagram's capture time and when it was due.
    let mut paced: Option<(u64, u64)> = None;
    let ports_only = DatagramFilter { ports: filter.ports.clone(), streams: Vec::new() };
    let streams_only = DatagramFilter { ports: Vec::new(), streams: filter.streams.clone() };
    loop {
        if stop.load(Ordering::Acquire) {
            summary.ended_early = Some("stopped by signal".into());
            break;
        }
        let packet = match reader.next_packet() {
            Ok(Some(p)) => p,
            Ok(None) => break,
            // Content errors end the replay but keep what was replayed;
            // a capture that yields nothing at all is an error.
            Err(e) if e.is_bad_capture() && summary.packets > 0 => {
                summary.ended_early = Some(e.to_string());
                break;
            }
            Err(e) => return Err(e),
        };
        summary.packets += 1;
        let udp =
            match decode_udp(packet.link_type, packet.data).and_then(|u| ports_only.check(&u).map(|()| u)) {
                Ok(u) => u,
                Err(reason) => {
                    skipped[skip_index(reason)] += 1;
                    continue;
                }
            };
        let ts = packet.ts_ns;
        // RTP is one packet per datagram; native payloads may hold several.
        let mut natives = if args.rtp { None } else { NativeDatagrams::of(udp.payload) };
        let whole = [udp.payload];
        let datagrams: Vec<&[u8]> = match natives.as_mut() {
            Some(n) => n.by_ref().collect(),
            None => whole.to_vec(),
        };
        if let Some(left) = natives.as_ref().map(NativeDatagrams::leftover).filter(|&n| n > 0) {
            summary.unparsed_tails += 1;
            summary.unparsed_tail_bytes += left as u64;
        }
        for payload in datagrams {
            if let Err(reason) = streams_only.check(&UdpView { payload, ..udp }) {
                skipped[skip_index(reason)] += 1;
                continue;
            }
            if matches!(target, Target::Socket { .. }) && !args.max_rate {
                let due = match paced {
                    None => start_mono,
                    Some((prev_ts, prev_due)) => {
                        let gap = (ts.saturating_sub(prev_ts) as f64 / args.speed) as u64;
                        if gap > max_gap_ns {
                            summary.gaps_shortened += 1;
                            summary.longest_gap_ns = summary.longest_gap_ns.max(gap);
                        }
                        prev_due.saturating_add(gap.min(max_gap_ns))
                    }
                };
                paced = Some((ts, due));
                if !sleep_until(due, stop) {
                    break;
                }
            }
            first_ts.get_or_insert(ts);
            last_ts = last_ts.max(ts);
            summary.datagrams += 1;
            summary.bytes += payload.len() as u64;
            match &mut target {
                Target::Socket { socket, to } => {
                    boundaries.observe(payload);
                    if socket.send_to(payload, *to).is_err() {
                        summary.send_errors += 1;
                    }
                    summary.frames = boundaries.frames;
                }
                Target::InProcess(p) => {
                    p.on_datagram(payload, ts);
                    summary.frames = p.processed().len() as u64;
                }
            }
        }
        progress.update(summary.frames, summary.datagrams, summary.bytes);
    }
    if let Target::InProcess(p) = target {
        let mut p = *p;
        p.flush(last_ts.saturating_add(1));
        summary.frames = p.processed().len() as u64;
        summary.ingest_counters = p.counters();
        summary.processed = p.into_processed();
    }
    progress.finish();
    summary.capture_span_ns = first_ts.map_or(0, |f| last_ts - f);
    summary.wall_ns = clock::monotonic_ns() - start_mono;
    summary.skipped =
        SkipReason::ALL.iter().zip(skipped).filter(|(_, n)| *n > 0).map(|(r, n)| (*r, n)).collect();
    Ok(summary)
}

fn skip_index(reason: SkipReason) -> usize {
    SkipReason::ALL.iter().position(|r| *r == reason).unwrap_or(0)
}

/// Longest single sleep while pacing, so a stop is seen within this time.
const MAX_SLEEP_NS: u64 = 20_000_000;

/// Sleeps until CLOCK_MONOTONIC reaches `due_ns` (coarse sleeps of at most
/// [`MAX_SLEEP_NS`], then a short spin); false if `stop` was raised first.
fn sleep_until(due_ns: u64, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Acquire) {
            return false;
        }
        let now = clock::monotonic_ns();
        if now >= due_ns {
            return true;
        }
        let left = due_ns - now;
        if left > 200_000 {
            std::thread::sleep(std::time::Duration::from_nanos((left - 100_000).min(MAX_SLEEP_NS)));
        } else {
            std::hint::spin_loop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn native_payloads_split_at_each_header_and_keep_the_rest_as_leftover() {
        let a = native::encode_frame(1, 1, &[1u8; 250], 100, 0);
        let mut payload = a.concat();
        payload.extend_from_slice(&[0xee; 7]);
        let mut split = NativeDatagrams::of(&payload).expect("starts with a native datagram");
        let parts: Vec<&[u8]> = split.by_ref().collect();
        assert_eq!(parts, a.iter().map(Vec::as_slice).collect::<Vec<_>>());
        assert_eq!(split.leftover(), 7);
        // A lone datagram has nothing left over; a non-native payload is not split.
        let mut lone = NativeDatagrams::of(&a[0]).unwrap();
        assert_eq!((lone.by_ref().count(), lone.leftover()), (1, 0));
        assert!(NativeDatagrams::of(b"\x80\x60 RTP-ish bytes of some length").is_none());
    }
}
