//! `frameloop send`: the sensor emulator's flags, turned into the library's
//! [`SendArgs`], [`ExpectArgs`] and `RdmaSendArgs` (the command itself is
//! [`super::loopback::send`]).

use super::choices::{ExpectActuation, GsoMode, Pacing, Pattern, SendFormat, Transport};
use frameloop::sender::{ExpectArgs, SendArgs};

#[derive(clap::Args, Debug)]
pub struct SendFlags {
    /// Destination, HOST:PORT (for example 127.0.0.1:5000). A name resolves
    /// to its first address.
    #[arg(long, value_name = "ADDR")]
    pub to: String,

    /// Frames per second, summed over all streams (fractions allowed, e.g.
    /// 0.5). Frame k is sent at start + k/rate; the whole frame goes out as
    /// one burst, or at the pace of --link-gbps.
    #[arg(long, value_name = "FPS", default_value_t = 1000.0)]
    pub rate: f64,

    /// Frame size in bytes (payload only, headers not counted), 1 to 4294967295.
    #[arg(long, value_name = "N", default_value_t = 65536)]
    pub frame_bytes: u64,

    /// UDP payload size of each datagram in bytes, including the 48-byte
    /// frameloop header: 49 to 65507. A frame becomes ceil(N / (M - 48))
    /// datagrams; only the last can be shorter. 8972 fills a 9000-byte MTU,
    /// 1472 a 1500-byte MTU.
    #[arg(long, value_name = "M", default_value_t = 8972)]
    pub packet_bytes: usize,

    /// Send this many frames in total (over all streams), then stop.
    #[arg(long, value_name = "K", conflicts_with = "duration")]
    pub count: Option<u64>,

    /// Send for this many seconds (fractions allowed), then stop. Without
    /// --count or --duration the sender runs until stopped (Ctrl-C).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,

    /// Number of streams; frames cycle through stream ids 0..S round-robin,
    /// each stream with its own frame sequence starting at 0.
    #[arg(long, value_name = "S", default_value_t = 1)]
    pub streams: u32,

    /// Payload content: `counter` (each 8-byte word holds its index, the
    /// stream id and the frame sequence) or `random` (seeded by stream and
    /// sequence). Both can be recomputed by a receiver to check the bytes.
    #[arg(long, value_enum, default_value_t = Pattern::Counter)]
    pub pattern: Pattern,

    /// UDP segmentation offload: `auto` uses UDP_SEGMENT when the kernel
    /// supports it and falls back to one datagram per message; `on` fails if
    /// it cannot; `off` never uses it. Either way sends go in sendmmsg batches.
    #[arg(long, value_enum, default_value_t = GsoMode::Auto)]
    pub gso: GsoMode,

    /// How the sender waits for each frame's time: `spin` (the last 80 µs
    /// on the clock, frames leave on time, one core busy at high rates) or
    /// `sleep` (sleeps only, frames may leave tens of microseconds late;
    /// for throughput runs where the receiver needs the cores).
    #[arg(long, value_enum, default_value_t = Pacing::Spin)]
    pub pacing: Pacing,

    /// How fast a sender that fell behind its schedule (a late wake-up, a
    /// busy core) sends the frames it owes, as a multiple of --rate: at
    /// least 1. Frames go back to back only for up to 250 µs at that rate,
    /// so a late sender neither drops frames nor floods the receiver with
    /// them. A sender more than 5 ms behind drops that deficit and goes on
    /// at --rate from then (counted in `schedule_rebases` and
    /// `skipped_frames`).
    #[arg(long, value_name = "RATIO", default_value_t = frameloop::sender::DEFAULT_CATCH_UP)]
    pub catch_up: f64,

    /// Source address to bind, ADDR:PORT (default: any address, any port, of
    /// the destination's family).
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<std::net::SocketAddr>,

    /// Send each frame at the pace of a link of this many gigabits per second
    /// (fractions allowed), as a sensor on such a link does, instead of in
    /// one burst: a datagram leaves once the link would have carried the
    /// frame's datagrams before it, each counted with 66 bytes of UDP, IP
    /// and Ethernet framing. Paced per message: with GSO, the datagrams of
    /// one message (up to 64 KiB) still leave back to back. The sender spins
    /// while a frame is on the link. A core too slow for that pace sends
    /// slower and says so: the frames some datagram of which left behind its
    /// time on the link by more than a tenth of the frame's time there
    /// (`frames_behind_link`, with `max_link_lag_ns`), and a warning.
    #[arg(long, value_name = "GBPS")]
    pub link_gbps: Option<f64>,
}

#[derive(clap::Args, Debug)]
pub struct ExpectFlags {
    /// Wait for the appliance's actuation messages (`[[actuate]]` outputs),
    /// match each to its frame and record the sensor-to-actuator round trip
    /// on this host's clock: `every` (each frame answered by each output;
    /// frames without an answer count as missing; the default when the flag
    /// is given bare) or `some` (outputs that send on detection or on a
    /// user flag). Replies come to the sending socket; see --actuation-listen.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "every", value_name = "WHICH")]
    pub expect_actuation: Option<ExpectActuation>,
    /// Read actuation messages on this address (an output with a fixed
    /// destination) instead of on the socket the frames leave from (an
    /// output with destination = "reply").
    #[arg(long, value_name = "ADDR", requires = "expect_actuation")]
    pub actuation_listen: Option<std::net::SocketAddr>,
    /// Outputs that answer each frame (with `every`); 0: as many as answered any.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub actuation_outputs: u32,
    /// A round trip longer than this counts as late (milliseconds; still in the histogram).
    #[arg(long, value_name = "MS", default_value_t = 100.0)]
    pub actuation_late_ms: f64,
    /// After the last frame, wait this long for the last answers (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 300)]
    pub actuation_wait_ms: u64,
}

#[cfg(feature = "rdma")]
/// RDMA options of `frameloop send` (with `--transport rdma`; `--to` is the
/// appliance's `rdma.listen` address).
#[derive(clap::Args, Debug)]
pub struct RdmaFlags {
    /// Local address of the RoCE interface to send from (default: the one
    /// rdma_cm routes to --to).
    #[arg(id = "rdma_bind", long = "rdma-bind", value_name = "ADDR")]
    pub bind: Option<std::net::IpAddr>,
    /// Path MTU in bytes (256 to 4096); 0 keeps the port's.
    #[arg(long = "rdma-mtu", value_name = "BYTES", default_value_t = 0)]
    pub mtu: u32,
    /// Milliseconds to wait for address and route resolution, the
    /// connection, and each completion.
    #[arg(long = "rdma-timeout-ms", value_name = "MS", default_value_t = 2000)]
    pub timeout_ms: u64,
}

/// Arguments of `frameloop send`.
#[derive(clap::Args, Debug)]
pub struct SendCommand {
    /// Where and what to send.
    #[command(flatten)]
    pub send: SendFlags,
    /// Which actuation messages to wait for after sending (`--expect-actuation`).
    #[command(flatten)]
    pub expect: ExpectFlags,
    /// udp (native datagrams; the default), or rdma (RDMA WRITE into the
    /// appliance's registered ring; --to is the appliance's rdma.listen).
    #[arg(long, value_enum, default_value = "udp")]
    pub transport: Transport,
    /// native (frameloop datagrams; the default), or hsb: emulate an HSB-style
    /// sensor bridge (16-byte big-endian header: frame counter, offset, frame
    /// length, last flag; one stream), for an appliance whose `[handler]` is
    /// handlers/hsb_ready.cu (docs/operators.md).
    #[arg(long, value_enum, default_value = "native")]
    pub format: SendFormat,
    #[cfg(feature = "rdma")]
    /// The RDMA sender's settings (`--transport rdma`).
    #[command(flatten)]
    pub rdma: RdmaFlags,
}

impl From<SendFlags> for SendArgs {
    fn from(f: SendFlags) -> Self {
        SendArgs {
            to: f.to,
            rate: f.rate,
            frame_bytes: f.frame_bytes,
            packet_bytes: f.packet_bytes,
            count: f.count,
            duration: f.duration,
            streams: f.streams,
            pattern: f.pattern.into(),
            gso: f.gso.into(),
            pacing: f.pacing.into(),
            catch_up: f.catch_up,
            bind: f.bind,
            link_gbps: f.link_gbps,
        }
    }
}

impl From<ExpectFlags> for ExpectArgs {
    fn from(f: ExpectFlags) -> Self {
        ExpectArgs {
            expect_actuation: f.expect_actuation.map(Into::into),
            actuation_listen: f.actuation_listen,
            actuation_outputs: f.actuation_outputs,
            actuation_late_ms: f.actuation_late_ms,
            actuation_wait_ms: f.actuation_wait_ms,
        }
    }
}

#[cfg(feature = "rdma")]
impl From<RdmaFlags> for frameloop::rdma::sender::RdmaSendArgs {
    fn from(f: RdmaFlags) -> Self {
        Self { bind: f.bind, mtu: f.mtu, timeout_ms: f.timeout_ms }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Send {
        #[command(flatten)]
        send: SendFlags,
        #[command(flatten)]
        expect: ExpectFlags,
    }

    #[test]
    fn the_library_defaults_are_the_command_line_defaults() {
        let parsed = Send::try_parse_from(["send", "--to", "127.0.0.1:5000"]).expect("parses");
        let send = SendArgs::from(parsed.send);
        assert_eq!(format!("{send:?}"), format!("{:?}", SendArgs::new("127.0.0.1:5000")));
        let expect = ExpectArgs::from(parsed.expect);
        assert_eq!(expect.expect_actuation, None);
    }
}
