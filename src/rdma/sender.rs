//! The RDMA sensor emulator (`frameloop send --transport rdma`): connects
//! to the appliance's rdma_cm listener, receives the ring descriptor, and
//! for each frame writes slot header + payload with one RDMA WRITE and then
//! the head sequence (the trailer) with a second, reading the consumer's
//! words only when its credit runs out (protocol: `docs/rdma.md`).

use super::RdmaError;
use super::remote::{
    CONSUMER_READ_BYTES, ConsumerState, Credit, CreditWindow, DESCRIPTOR_BYTES, RemoteFrame, RingDescriptor,
    trailer,
};
use super::verbs::{Connection, StagingBuffer, WR_DESCRIPTOR, chain, create_connection, path_mtu};
use crate::clock::{monotonic_ns, realtime_ns};
use crate::ring::layout::SLOT_PAYLOAD_OFFSET;
use crate::sender::{Schedule, SendArgs, wait_until};
use sideway::ibverbs::queue_pair::{PostSendGuard, QueuePair, SetScatterGatherEntry, WorkRequestFlags};
use sideway::rdmacm::communication_manager::{EventChannel, EventType, PortSpace};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

const WR_SLOT: u64 = 10;
const WR_TRAILER: u64 = 11;
const WR_CONSUMER_READ: u64 = 12;

/// RDMA options of `frameloop send` (with `--transport rdma`; `--to` is the
/// appliance's `rdma.listen` address).
#[derive(Debug, Clone)]
pub struct RdmaSendArgs {
    /// Local address of the RoCE interface to send from (default: the one
    /// rdma_cm routes to --to).
    pub bind: Option<IpAddr>,
    /// Path MTU in bytes (256 to 4096); 0 keeps the port's.
    pub mtu: u32,
    /// Milliseconds to wait for address and route resolution, the
    /// connection, and each completion.
    pub timeout_ms: u64,
}

/// Counters of an RDMA sender run.
#[derive(serde::Serialize, Debug, Clone, Default, PartialEq)]
pub struct RdmaSenderStats {
    /// Frames written and published.
    pub frames: u64,
    /// Frames not written because the consumer still held their slot (policy `every`).
    pub ring_full: u64,
    /// RDMA READs of the consumer words.
    pub consumer_reads: u64,
    /// Payload bytes written.
    pub bytes: u64,
    pub elapsed_s: f64,
}

/// Waits for the rdma_cm event `want` on `channel`, failing on any other
/// outcome (rejected, unreachable, address or route error) or on timeout.
fn wait_event(channel: &Arc<EventChannel>, want: EventType, timeout: Duration) -> Result<(), RdmaError> {
    let deadline = Instant::now() + timeout;
    loop {
        match channel.get_cm_event() {
            Ok(event) => {
                let (kind, status) = (event.event_type(), event.status());
                let _ = event.ack();
                if kind == want {
                    return Ok(());
                }
                return Err(RdmaError::Connection(format!(
                    "expected {want:?} but rdma_cm reported {kind:?} (status {status}); check --to (the appliance's rdma.listen) and that the appliance runs with RDMA"
                )));
            }
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(1)),
            Err(e) => {
                return Err(RdmaError::Connection(format!(
                    "no {want:?} within {} ms ({})",
                    timeout.as_millis(),
                    chain(&e)
                )));
            }
        }
    }
}

/// Connects to the appliance and returns the connection, the descriptor,
/// and the protection domain's staging buffer for `frame_bytes` frames.
fn connect(
    args: &SendArgs,
    rdma: &RdmaSendArgs,
) -> Result<(Arc<EventChannel>, Connection, RingDescriptor, StagingBuffer), RdmaError> {
    let cm = |what, e: &dyn std::error::Error| RdmaError::Cm { what, why: chain(e) };
    let timeout = Duration::from_millis(rdma.timeout_ms);
    let to = args.destination().map_err(|e| RdmaError::Sender(e.to_string()))?;
    let channel =
        EventChannel::new().map_err(|e| cm("opening the event channel (is rdma_ucm loaded?)", &e))?;
    channel.set_nonblocking(true).map_err(|e| cm("making the event channel non-blocking", &e))?;
    let id = channel.create_id(PortSpace::Tcp).map_err(|e| cm("creating an id", &e))?;
    id.resolve_addr(rdma.bind.map(|ip| (ip, 0).into()), to, timeout).map_err(|e| cm("resolve_addr", &e))?;
    wait_event(&channel, EventType::AddressResolved, timeout)?;
    id.resolve_route(timeout).map_err(|e| cm("resolve_route", &e))?;
    wait_event(&channel, EventType::RouteResolved, timeout)?;
    let ctx = id
        .get_device_context()
        .ok_or_else(|| RdmaError::Connection(format!("{to} is not reachable through an RDMA device")))?;
    let pd = ctx.alloc_pd().map_err(|e| cm("allocating a protection domain", &e))?;
    let mut conn = create_connection(&ctx, &pd, Arc::clone(&id), 4)?;
    conn.id.connect(conn.parameters()).map_err(|e| cm("connect", &e))?;
    wait_event(&channel, EventType::ConnectResponse, timeout)?;
    conn.move_to_ready_to_send(path_mtu(rdma.mtu))?;
    let descriptor_buf = StagingBuffer::new(&pd, DESCRIPTOR_BYTES)?;
    {
        let mut guard = conn.qp.start_post_recv();
        let wr = guard.construct_wr(WR_DESCRIPTOR);
        // SAFETY: registered buffer of DESCRIPTOR_BYTES that lives until the
        // receive completes (waited for below).
        unsafe { wr.setup_sge(descriptor_buf.mr.lkey(), descriptor_buf.addr(), DESCRIPTOR_BYTES as u32) };
        guard
            .post()
            .map_err(|e| RdmaError::Connection(format!("posting a receive failed: {}", chain(&e))))?;
    }
    conn.id.establish().map_err(|e| cm("establish", &e))?;
    conn.wait_completion(timeout)?;
    let descriptor = RingDescriptor::decode(&descriptor_buf.bytes)?;
    let frame_bytes = usize::try_from(args.frame_bytes).unwrap_or(usize::MAX);
    let Some(slot_len) = descriptor.slot_write_len(frame_bytes) else {
        return Err(RdmaError::Sender(format!(
            "--frame-bytes {} exceeds the appliance's slot capacity of {} bytes (ring.slot_bytes)",
            args.frame_bytes, descriptor.payload_capacity
        )));
    };
    let staging = StagingBuffer::new(&pd, slot_len + 8 + CONSUMER_READ_BYTES)?;
    Ok((channel, conn, descriptor, staging))
}

/// Runs the RDMA sender: `args` gives destination, rate, frame size,
/// count/duration, streams and pattern (packet size and GSO do not apply).
/// `progress` gets a snapshot about twice a second.
pub fn run_rdma_sender(
    args: &SendArgs,
    rdma: &RdmaSendArgs,
    stop: &AtomicBool,
    mut progress: impl FnMut(&RdmaSenderStats),
) -> Result<RdmaSenderStats, RdmaError> {
    args.validate().map_err(|e| RdmaError::Sender(e.to_string()))?;
    let timeout = Duration::from_millis(rdma.timeout_ms);
    let (_channel, mut conn, d, mut staging) = connect(args, rdma)?;
    let frame_len = args.frame_bytes as usize;
    let slot_len = SLOT_PAYLOAD_OFFSET + frame_len;
    let (trailer_at, read_at) = (slot_len, slot_len + 8);
    let lkey = staging.mr.lkey();
    let base = staging.addr();
    let mut credit = CreditWindow::new(d.slot_count);
    let schedule =
        Schedule::new(monotonic_ns(), args.rate, args.count, args.duration.map(Duration::from_secs_f64));
    let mut stats = RdmaSenderStats::default();
    let mut next_progress = schedule.start_ns() + 500_000_000;
    let (mut k, mut ring_seq) = (0u64, 1u64);
    while !schedule.is_past_end(k) {
        let stream = (k % args.streams as u64) as u32;
        let frame_seq = k / args.streams as u64;
        let Some(woke) = wait_until(schedule.due_ns(k), stop) else { break };
        k += 1;
        if credit.check(ring_seq) == Credit::Refresh {
            let mut guard = conn.qp.start_post_send();
            let wr = guard
                .construct_wr(WR_CONSUMER_READ, WorkRequestFlags::Signaled)
                .setup_read(d.rkey, d.consumer_addr());
            // SAFETY: the read lands in the registered staging buffer, inside
            // it (offset read_at, CONSUMER_READ_BYTES long), and is waited for.
            unsafe { wr.setup_sge(lkey, base + read_at as u64, CONSUMER_READ_BYTES as u32) };
            guard
                .post()
                .map_err(|e| RdmaError::Connection(format!("posting a read failed: {}", chain(&e))))?;
            conn.wait_completion(timeout)?;
            stats.consumer_reads += 1;
            let words: &[u8; CONSUMER_READ_BYTES] =
                staging.bytes[read_at..read_at + CONSUMER_READ_BYTES].try_into().expect("sized slice");
            credit.update(ConsumerState::decode(words));
            if credit.check(ring_seq) == Credit::Refresh {
                stats.ring_full += 1;
                continue;
            }
        }
        let frame = RemoteFrame {
            ring_seq,
            frame_seq,
            stream_id: stream,
            payload_len: frame_len as u32,
            sender_ts_ns: realtime_ns(),
            posted_ns: realtime_ns(),
        };
        args.pattern.fill(stream, frame_seq, 0, &mut staging.bytes[SLOT_PAYLOAD_OFFSET..slot_len]);
        frame.encode_header(&mut staging.bytes[..SLOT_PAYLOAD_OFFSET]);
        staging.bytes[trailer_at..trailer_at + 8].copy_from_slice(&trailer(ring_seq));
        {
            let mut guard = conn.qp.start_post_send();
            let wr = guard
                .construct_wr(WR_SLOT, WorkRequestFlags::none())
                .setup_write(d.rkey, d.slot_addr(ring_seq));
            // SAFETY: both requests read registered staging bytes that are not
            // touched again until the trailer's completion (which, on an RC
            // QP, follows the slot write's) has been waited for.
            unsafe { wr.setup_sge(lkey, base, slot_len as u32) };
            let wr =
                guard.construct_wr(WR_TRAILER, WorkRequestFlags::Signaled).setup_write(d.rkey, d.head_addr());
            // SAFETY: as above.
            unsafe { wr.setup_sge(lkey, base + trailer_at as u64, 8) };
            guard
                .post()
                .map_err(|e| RdmaError::Connection(format!("posting a frame failed: {}", chain(&e))))?;
        }
        conn.wait_completion(timeout)?;
        stats.frames += 1;
        stats.bytes += frame_len as u64;
        ring_seq += 1;
        if woke >= next_progress {
            stats.elapsed_s = (monotonic_ns() - schedule.start_ns()) as f64 / 1e9;
            progress(&stats);
            next_progress = woke + 500_000_000;
        }
    }
    stats.elapsed_s = (monotonic_ns().saturating_sub(schedule.start_ns())) as f64 / 1e9;
    let _ = conn.id.disconnect();
    Ok(stats)
}
