//! The `[ingest]` table: [`UdpConfig`] (socket, allowlist, receive thread,
//! transport) with the reassembly keys flattened in from [`ReassemblyConfig`],
//! and its validation naming each key.

use super::allow::parse_cidr;
use super::transport::Transport;
use crate::config_problem::{ConfigProblem, check_range};
use serde::{Deserialize, Serialize};
use std::net::SocketAddr;

/// Settings of the UDP receiver (the `[ingest]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UdpConfig {
    /// Local address and port to listen on (`"0.0.0.0:5000"`, `"[::]:5000"`).
    pub bind: String,
    /// Sources allowed to send, as CIDR blocks or single addresses
    /// (`"10.0.0.0/8"`, `"127.0.0.1"`, `"fd00::/8"`); empty allows every source.
    pub allow: Vec<String>,
    /// Socket receive buffer to ask for (bytes). The kernel caps it at
    /// `net.core.rmem_max` unless the process may use `SO_RCVBUFFORCE`.
    pub recv_buffer_bytes: usize,
    /// `SO_BUSY_POLL` time (µs); 0 leaves it off. Needs `CAP_NET_ADMIN` to raise.
    pub busy_poll_us: u32,
    /// After datagrams arrived, keep reading without blocking (spinning on
    /// `recvmmsg`) for this long (µs) before waiting in epoll again; 0 always
    /// waits. Spinning saves the wake-up per burst at the price of a busy core;
    /// the counter `busy_poll_gaps` says how often the core was taken from
    /// the spinning thread for over 50 µs anyway.
    pub poll_budget_us: u32,
    /// Run the receiving thread under `SCHED_FIFO` at this priority (1-99) so
    /// that other busy threads on the same cores cannot delay it until the
    /// socket buffer overflows; 0 leaves the thread's scheduling alone. Needs
    /// `CAP_SYS_NICE` (otherwise logged and skipped). Keep
    /// `poll_budget_us` small with it: a real-time thread that spins starves
    /// ordinary threads on its core for that long.
    pub realtime_priority: u8,
    /// Datagrams (or GRO buffers) read per `recvmmsg` call.
    pub batch: usize,
    /// Ask the kernel for UDP GRO (coalesced receive), falling back if refused.
    pub gro: bool,
    /// Share the port with other processes (`SO_REUSEPORT` between
    /// processes): every process that sets it may bind the port, and the
    /// kernel spreads the datagrams over them, one flow to one socket. Off
    /// (the default), a second process on the port fails at start-up
    /// naming `ingest.bind` (see `ingest/port_owner.rs`); this process's
    /// own reading threads share it whatever this says.
    pub reuse_port: bool,
    /// One-copy receive: point the kernel at the ring slot where each
    /// expected datagram's payload belongs, so it is copied once (by the
    /// kernel) instead of twice; datagrams that arrive elsewhere than
    /// predicted are moved as before. `auto` does it for datagrams of at
    /// least [`ONE_COPY_MIN_PAYLOAD`] payload bytes (below that the
    /// header/payload pieces cost the kernel more than the copy saved, as
    /// measured); `on` for every size; `off` never. Native format only; off
    /// with a datagram tap (capture recording).
    pub receive_into_slots: ReceiveIntoSlots,
    /// Assemble frames on a second thread, so that the receiving thread
    /// only reads the socket: it hands each filled receive batch over (in
    /// order, through a fixed pool of batches) and reads on while the
    /// other copies the payloads into ring slots. Raises the rate one
    /// stream can be received at by about the share of the receiving
    /// thread's time that assembly took, at the cost of a second busy core
    /// (place it with `service.assembly_cpu`) and a hand-off per batch.
    /// Payloads are then always copied by the assembly thread, so
    /// `receive_into_slots = "on"` is refused with it.
    pub assembly_thread: bool,
    /// Threads reading the socket's port (1-16; more than 1 needs
    /// `assembly_thread`). Each reads a socket of its own, all bound to
    /// `bind` in one `SO_REUSEPORT` group (set on them whatever
    /// `reuse_port` says) that the kernel spreads the datagrams over at
    /// random, one GRO buffer at a time, so that one flow is read by as
    /// many threads; the assembly thread merges what they read back into
    /// arrival order (by the kernel's receive times). For streams whose
    /// receiving thread is busy with the kernel's copy alone; place the
    /// threads with `service.receiver_cpu` and `service.reader_cpus`.
    /// Each reader sees about 1/N of the datagrams, so lengthen
    /// `poll_budget_us` with it (about 4N times the gap between
    /// datagrams that should not cost a wake-up).
    pub reading_threads: usize,
    /// Reassembly keys, flattened into the same table.
    #[serde(flatten)]
    pub reassembly: ReassemblyConfig,
    /// `auto` (RDMA when a device is usable, UDP otherwise, saying why),
    /// `rdma` (fail unless RDMA works) or `udp`. RDMA settings: `[rdma]`.
    pub transport: Transport,
    /// `native` (default) or `hsb`: the emulated HSB sensor bridge (needs `[handler]`).
    pub format: super::hsb::IngestFormat,
}

/// `ingest.receive_into_slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReceiveIntoSlots {
    /// For datagrams of at least [`ONE_COPY_MIN_PAYLOAD`] payload bytes.
    #[default]
    Auto,
    /// For every datagram size.
    On,
    /// Never: every payload is copied from the receive buffer.
    Off,
}

/// Smallest datagram payload `receive_into_slots = "auto"` places straight
/// into slots. On an H100 host with 1,472-byte datagrams the receiving
/// thread spent 0.062 CPU-s per Gbit placing them against 0.037 copying
/// (results archive: `bench/results/ingest-compare-h100-2026-11-25/`); at 8,972 bytes placing
/// held 29.4 Gb/s without loss against 20.0 copying.
pub const ONE_COPY_MIN_PAYLOAD: usize = 4096;

impl ReceiveIntoSlots {
    /// The smallest payload to place, or `None` when off.
    pub fn min_payload(self) -> Option<usize> {
        match self {
            ReceiveIntoSlots::Auto => Some(ONE_COPY_MIN_PAYLOAD),
            ReceiveIntoSlots::On => Some(0),
            ReceiveIntoSlots::Off => None,
        }
    }
}

impl Default for UdpConfig {
    fn default() -> Self {
        Self {
            bind: "0.0.0.0:5000".into(),
            allow: Vec::new(),
            recv_buffer_bytes: 8 << 20,
            busy_poll_us: 0,
            poll_budget_us: 0,
            realtime_priority: 0,
            batch: 64,
            gro: true,
            reuse_port: false,
            receive_into_slots: ReceiveIntoSlots::Auto,
            assembly_thread: false,
            reading_threads: 1,
            reassembly: ReassemblyConfig::default(),
            transport: Transport::default(),
            format: Default::default(),
        }
    }
}

impl UdpConfig {
    /// Records every problem, naming its `ingest.*` key.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        if self.bind.parse::<SocketAddr>().is_err() {
            problems.push(ConfigProblem::new(
                "ingest.bind",
                format!(
                    "{:?} is not an address and port; write it like \"0.0.0.0:5000\" or \"[::]:5000\"",
                    self.bind
                ),
            ));
        }
        for entry in &self.allow {
            if let Err(reason) = parse_cidr(entry) {
                problems.push(ConfigProblem::new("ingest.allow", format!("{entry:?}: {reason}")));
            }
        }
        check_range(problems, "ingest.recv_buffer_bytes", self.recv_buffer_bytes, 65536, 1 << 30);
        check_range(problems, "ingest.busy_poll_us", self.busy_poll_us, 0, 100_000);
        check_range(problems, "ingest.poll_budget_us", self.poll_budget_us, 0, 1_000_000);
        check_range(problems, "ingest.realtime_priority", self.realtime_priority, 0, 99);
        check_range(problems, "ingest.batch", self.batch, 1, 1024);
        if self.assembly_thread && self.receive_into_slots == ReceiveIntoSlots::On {
            problems.push(ConfigProblem::new(
                "ingest.assembly_thread",
                "the assembly thread copies every payload, so it cannot be combined with \
                 ingest.receive_into_slots = \"on\"; set receive_into_slots = \"auto\" (or \"off\") or \
                 assembly_thread = false",
            ));
        }
        check_range(problems, "ingest.reading_threads", self.reading_threads, 1, MAX_READING_THREADS);
        if self.reading_threads > 1 && !self.assembly_thread {
            problems.push(ConfigProblem::new(
                "ingest.reading_threads",
                format!(
                    "{} reading threads need a thread to merge what they read; set \
                     ingest.assembly_thread = true (or reading_threads = 1)",
                    self.reading_threads
                ),
            ));
        }
        self.reassembly.validate(problems);
    }
}

/// Most reading threads `ingest.reading_threads` accepts.
pub const MAX_READING_THREADS: usize = 16;

/// Reassembly settings (keys of the `[ingest]` table).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReassemblyConfig {
    /// A frame still incomplete this long after its first packet is published
    /// flagged incomplete and timed out (ms).
    pub frame_timeout_ms: u64,
    /// Frames assembled at once; a new frame beyond this publishes the oldest.
    pub max_frames_in_flight: usize,
    /// Largest packet count accepted for one frame (bounds the packet bitmap).
    pub max_packets_per_frame: u32,
    /// A new frame's sequence further than this many frames before or after
    /// its stream's high-water mark is a stream restart (rule 7 of
    /// [`super::reassembly`]). Packets this many frames late are useless
    /// anyway (their frame timed out).
    pub restart_window: u64,
}

impl Default for ReassemblyConfig {
    fn default() -> Self {
        Self {
            frame_timeout_ms: 20,
            max_frames_in_flight: 4,
            max_packets_per_frame: 65536,
            restart_window: 32,
        }
    }
}

impl ReassemblyConfig {
    /// Records every out-of-range value, naming its `ingest.*` key.
    pub fn validate(&self, problems: &mut Vec<ConfigProblem>) {
        check_range(problems, "ingest.frame_timeout_ms", self.frame_timeout_ms, 1, 60_000);
        check_range(problems, "ingest.max_frames_in_flight", self.max_frames_in_flight, 1, 64);
        check_range(problems, "ingest.max_packets_per_frame", self.max_packets_per_frame, 1, 1 << 20);
        check_range(problems, "ingest.restart_window", self.restart_window, 8, 1 << 40);
        // A smaller window could take ordinary reordering across the frames in flight for a restart.
        let floor = 2 * self.max_frames_in_flight as u64;
        if self.restart_window < floor {
            problems.push(ConfigProblem::new(
                "ingest.restart_window",
                format!(
                    "{} is below twice ingest.max_frames_in_flight ({floor}); raise ingest.restart_window",
                    self.restart_window
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_parse_and_validation() {
        let cfg: UdpConfig = toml::from_str("").unwrap();
        assert_eq!(cfg, UdpConfig::default());
        let cfg: UdpConfig = toml::from_str(
            "bind = \"127.0.0.1:6000\"\nallow = [\"10.0.0.0/8\"]\nframe_timeout_ms = 7\ngro = false",
        )
        .unwrap();
        assert_eq!((cfg.reassembly.frame_timeout_ms, cfg.gro, cfg.allow.len()), (7, false, 1));
        let unknown =
            toml::from_str::<UdpConfig>("bind = \"127.0.0.1:6000\"\nframe_timeout = 7").unwrap_err();
        assert!(unknown.to_string().contains("frame_timeout"), "{unknown}");
        let mut problems = Vec::new();
        UdpConfig::default().validate(&mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        let bad = UdpConfig {
            bind: "5000".into(),
            allow: vec!["10.0.0.0/40".into()],
            recv_buffer_bytes: 10,
            poll_budget_us: 2_000_000,
            realtime_priority: 100,
            batch: 0,
            reassembly: ReassemblyConfig { max_frames_in_flight: 0, ..Default::default() },
            ..Default::default()
        };
        bad.validate(&mut problems);
        let keys: Vec<_> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "ingest.bind",
                "ingest.allow",
                "ingest.recv_buffer_bytes",
                "ingest.poll_budget_us",
                "ingest.realtime_priority",
                "ingest.batch",
                "ingest.max_frames_in_flight"
            ]
        );
    }

    #[test]
    fn an_assembly_thread_refuses_payloads_placed_by_the_kernel() {
        let cfg: UdpConfig = toml::from_str("assembly_thread = true").unwrap();
        assert!(cfg.assembly_thread);
        let mut problems = Vec::new();
        cfg.validate(&mut problems);
        assert!(problems.is_empty(), "auto is fine: {problems:?}");
        let on = UdpConfig { receive_into_slots: ReceiveIntoSlots::On, ..cfg };
        on.validate(&mut problems);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key, "ingest.assembly_thread");
        assert!(problems[0].message.contains("receive_into_slots"), "{}", problems[0]);
    }

    #[test]
    fn several_reading_threads_need_an_assembly_thread_and_a_bound() {
        let cfg: UdpConfig = toml::from_str("assembly_thread = true\nreading_threads = 3").unwrap();
        assert_eq!(cfg.reading_threads, 3);
        let mut problems = Vec::new();
        cfg.validate(&mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(UdpConfig::default().reading_threads, 1);
        for (text, hint) in [
            ("reading_threads = 2", "assembly_thread = true"),
            ("assembly_thread = true\nreading_threads = 0", "from 1 to 16"),
            ("assembly_thread = true\nreading_threads = 17", "from 1 to 16"),
        ] {
            let cfg: UdpConfig = toml::from_str(text).unwrap();
            let mut problems = Vec::new();
            cfg.validate(&mut problems);
            assert_eq!(problems.len(), 1, "{text}: {problems:?}");
            assert_eq!(problems[0].key, "ingest.reading_threads", "{text}");
            assert!(problems[0].message.contains(hint), "{text}: {}", problems[0]);
        }
    }

    #[test]
    fn config_validation_names_keys() {
        let mut problems = Vec::new();
        ReassemblyConfig::default().validate(&mut problems);
        assert!(problems.is_empty());
        let bad = ReassemblyConfig {
            frame_timeout_ms: 0,
            max_frames_in_flight: 65,
            max_packets_per_frame: 0,
            restart_window: 8,
        };
        bad.validate(&mut problems);
        let keys: Vec<_> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "ingest.frame_timeout_ms",
                "ingest.max_frames_in_flight",
                "ingest.max_packets_per_frame",
                "ingest.restart_window"
            ]
        );
        assert!(problems[3].message.contains("max_frames_in_flight"), "{}", problems[3]);
        assert!(toml::from_str::<ReassemblyConfig>("frame_timeout_ms = 3\nbogus = 1").is_err());
        let parsed: ReassemblyConfig = toml::from_str("frame_timeout_ms = 3").unwrap();
        assert_eq!((parsed.frame_timeout_ms, parsed.max_frames_in_flight), (3, 4));
    }
}
