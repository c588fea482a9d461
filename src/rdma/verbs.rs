//! The sideway implementation of [`Verbs`] (device, listener, registration)
//! and the appliance's [`RdmaEndpoint`]: it accepts one sensor at a time
//! over rdma_cm, moves the connection's RC queue pair to RTS and sends it
//! the ring descriptor. Frames then never pass through this code: the
//! sensor writes them into the ring and publishes them itself.

use super::RdmaError;
use super::config::RdmaConfig;
use super::plan::{LibraryNotLoadable, RdmaUnavailable, RegistrationMethod, Verbs};
use super::remote::{DESCRIPTOR_BYTES, RingDescriptor};
use crate::ring::FrameRing;
use sideway::ibverbs::AccessFlags;
use sideway::ibverbs::address::GidType;
use sideway::ibverbs::completion::GenericCompletionQueue;
use sideway::ibverbs::device::{DeviceInfo, DeviceList};
use sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use sideway::ibverbs::memory_region::MemoryRegion;
use sideway::ibverbs::protection_domain::ProtectionDomain;
use sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair, QueuePairState, QueuePairType, SetScatterGatherEntry,
    WorkRequestFlags,
};
use sideway::rdmacm::communication_manager::{
    ConnectionParameter, EventChannel, EventType, Identifier, PortSpace,
};
use std::error::Error as StdError;
use std::ffi::{CStr, CString};
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Access the ring's region grants: the sensor writes slots and the head
/// word and reads the consumer words. No relaxed ordering: the trailer
/// protocol relies on the NIC's writes reaching memory in order.
pub fn ring_access() -> AccessFlags {
    AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead
}

/// Work-request ids.
pub(crate) const WR_DESCRIPTOR: u64 = 1;
/// How long the endpoint sleeps when no rdma_cm event is pending.
const EVENT_POLL: Duration = Duration::from_millis(2);

/// An error and its sources in one line (sideway's errors keep the OS
/// error in the source).
pub(crate) fn chain(e: &dyn StdError) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(inner) = cur {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        cur = inner.source();
    }
    s
}

/// A memory registration the verbs library refused; its text is the error
/// with its sources (sideway keeps the OS error there).
#[derive(Debug, thiserror::Error)]
#[error("{}", chain(self.0.as_ref()))]
pub struct RegistrationRefused(Box<dyn StdError + Send + Sync>);

impl RegistrationRefused {
    fn new(e: impl StdError + Send + Sync + 'static) -> Self {
        Self(Box::new(e))
    }
}

/// Checks that a shared library can be loaded, returning the loader's message otherwise.
fn library_loadable(name: &str) -> Result<(), LibraryNotLoadable> {
    let c = CString::new(name).expect("library names have no NUL");
    // SAFETY: dlopen with a valid C string; the handle is closed right away.
    let handle = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_LOCAL) };
    if handle.is_null() {
        // SAFETY: dlerror returns NULL or a valid C string owned by the loader.
        let msg = unsafe { libc::dlerror() };
        let message = if msg.is_null() {
            format!("{name}: cannot be loaded")
        } else {
            // SAFETY: non-null, NUL-terminated, valid until the next dl* call.
            unsafe { CStr::from_ptr(msg) }.to_string_lossy().into_owned()
        };
        return Err(LibraryNotLoadable { message });
    }
    // SAFETY: a handle returned by dlopen, closed once.
    unsafe { libc::dlclose(handle) };
    Ok(())
}

/// Converts a configured path MTU in bytes to the verbs enum.
pub(crate) fn path_mtu(bytes: u32) -> Option<Mtu> {
    match bytes {
        256 => Some(Mtu::Mtu256),
        512 => Some(Mtu::Mtu512),
        1024 => Some(Mtu::Mtu1024),
        2048 => Some(Mtu::Mtu2048),
        4096 => Some(Mtu::Mtu4096),
        _ => None,
    }
}

/// The verbs of the real RDMA stack, through sideway.
pub struct SidewayVerbs;

/// A device opened for the appliance: rdma_cm listener bound to
/// `rdma.listen`, and a protection domain on the listener's device.
pub struct SidewayDevice {
    pub(crate) name: String,
    pub(crate) listen: SocketAddr,
    pub(crate) channel: Arc<EventChannel>,
    /// Kept alive: dropping it would stop rdma_cm listening.
    pub(crate) _listener: Arc<Identifier>,
    pub(crate) ctx: Arc<DeviceContext>,
    pub(crate) pd: Arc<ProtectionDomain>,
    pub(crate) mtu: Option<Mtu>,
}

impl Verbs for SidewayVerbs {
    type Device = SidewayDevice;
    type Region = Arc<MemoryRegion>;
    type Error = RegistrationRefused;

    fn open(&self, cfg: &RdmaConfig) -> Result<SidewayDevice, RdmaUnavailable> {
        library_loadable("libibverbs.so.1").map_err(RdmaUnavailable::NoLibrary)?;
        library_loadable("librdmacm.so.1").map_err(RdmaUnavailable::NoLibrary)?;
        let devices = DeviceList::new().map_err(|e| {
            RdmaUnavailable::NoDevice(format!(
                "{}; the kernel's RDMA support (ib_uverbs and the NIC's RDMA driver) is not loaded",
                chain(&e)
            ))
        })?;
        let names: Vec<String> = devices.iter().map(|d| d.name()).collect();
        if names.is_empty() {
            return Err(RdmaUnavailable::NoDevice(
                "ibv_get_device_list found none; check `rdma link` and that the NIC's RDMA driver (mlx5_ib) is loaded"
                    .into(),
            ));
        }
        if !cfg.device.is_empty() && !names.contains(&cfg.device) {
            return Err(RdmaUnavailable::DeviceNotFound {
                wanted: cfg.device.clone(),
                found: names.join(", "),
            });
        }
        let listen_err = |why: String| RdmaUnavailable::Listen { listen: cfg.listen.clone(), why };
        let listen = cfg.listen_addr().ok_or_else(|| listen_err("not an address and port".into()))?;
        if listen.ip().is_unspecified() {
            return Err(listen_err(
                "a wildcard address names no RDMA device; set it to the RoCE interface's own address".into(),
            ));
        }
        let channel = EventChannel::new().map_err(|e| {
            listen_err(format!("cannot open rdma_cm ({}); load the rdma_ucm module", chain(&e)))
        })?;
        let listener = channel
            .create_id(PortSpace::Tcp)
            .map_err(|e| listen_err(format!("cannot create an rdma_cm id: {}", chain(&e))))?;
        listener.bind_addr(listen).map_err(|e| {
            listen_err(format!(
                "rdma_cm cannot bind it ({}); it must be an address of a RoCE interface on this host, with the port free",
                chain(&e)
            ))
        })?;
        let ctx = listener.get_device_context().ok_or_else(|| {
            listen_err(format!("the address is on no RDMA device (devices here: {})", names.join(", ")))
        })?;
        let name = ctx.name();
        if !cfg.device.is_empty() && cfg.device != name {
            return Err(listen_err(format!(
                "the address is on {name}, not on rdma.device = {:?}; make the two agree",
                cfg.device
            )));
        }
        let port = ctx.query_port(cfg.port).map_err(|e| RdmaUnavailable::PortNotActive {
            device: name.clone(),
            port: cfg.port,
            state: format!("not queryable ({})", chain(&e)),
        })?;
        if port.port_state() != PortState::Active {
            return Err(RdmaUnavailable::PortNotActive {
                device: name.clone(),
                port: cfg.port,
                state: format!("{:?}", port.port_state()).to_lowercase(),
            });
        }
        if cfg.gid_index >= 0 {
            let gid_err = |why: String| RdmaUnavailable::Gid {
                device: name.clone(),
                port: cfg.port,
                index: cfg.gid_index,
                why,
            };
            let entry = ctx
                .query_gid_ex(cfg.port, cfg.gid_index as u32)
                .map_err(|e| gid_err(format!("no such entry ({}); list them with show_gids", chain(&e))))?;
            if entry.gid_type() != GidType::RoceV2 {
                return Err(gid_err(format!(
                    "the entry is {:?}, not RoCEv2; pick the RoCEv2 entry of the listen address (show_gids)",
                    entry.gid_type()
                )));
            }
        }
        let pd = ctx.alloc_pd().map_err(|e| {
            RdmaUnavailable::NoDevice(format!("cannot allocate a protection domain on {name}: {}", chain(&e)))
        })?;
        listener.listen(1).map_err(|e| listen_err(format!("rdma_cm cannot listen on it: {}", chain(&e))))?;
        Ok(SidewayDevice { name, listen, channel, _listener: listener, ctx, pd, mtu: path_mtu(cfg.mtu) })
    }

    fn device_name(&self, dev: &SidewayDevice) -> String {
        dev.name.clone()
    }

    fn register_host(
        &self,
        dev: &SidewayDevice,
        addr: u64,
        len: usize,
    ) -> Result<Arc<MemoryRegion>, RegistrationRefused> {
        // SAFETY: callers pass ring memory that outlives the region (the
        // endpoint owns both the ring and the region, and drops the region first).
        unsafe { dev.pd.reg_mr(addr as usize, len, ring_access()) }.map_err(RegistrationRefused::new)
    }

    fn register_dmabuf(
        &self,
        dev: &SidewayDevice,
        fd: RawFd,
        len: usize,
        iova: u64,
    ) -> Result<Arc<MemoryRegion>, RegistrationRefused> {
        // SAFETY: `fd` is a dma-buf exported for `len` bytes of GPU memory that
        // outlives the region (see `gpu::device_memory::DeviceRingMemory`).
        unsafe { dev.pd.reg_dmabuf_mr(0, len, iova, fd, ring_access()) }.map_err(RegistrationRefused::new)
    }

    fn register_device_address(
        &self,
        dev: &SidewayDevice,
        dptr: u64,
        len: usize,
    ) -> Result<Arc<MemoryRegion>, RegistrationRefused> {
        // SAFETY: as `register_dmabuf`; nvidia-peermem pins the GPU pages.
        unsafe { dev.pd.reg_mr(dptr as usize, len, ring_access()) }.map_err(RegistrationRefused::new)
    }
}

/// A connected queue pair with its completion queue.
pub(crate) struct Connection {
    pub(crate) id: Arc<Identifier>,
    pub(crate) qp: GenericQueuePair,
    pub(crate) cq: GenericCompletionQueue,
}

/// Creates an RC queue pair (and its CQ) on `pd` for `id`'s connection.
pub(crate) fn create_connection(
    ctx: &Arc<DeviceContext>,
    pd: &Arc<ProtectionDomain>,
    id: Arc<Identifier>,
    send_depth: u32,
) -> Result<Connection, RdmaError> {
    let cm = |what, e: &dyn StdError| RdmaError::Cm { what, why: chain(e) };
    let cq =
        ctx.create_cq_builder().setup_cqe(send_depth + 2).build_ex().map_err(|e| cm("creating a CQ", &e))?;
    let cq = GenericCompletionQueue::from(cq);
    let mut builder = pd.create_qp_builder();
    builder
        .setup_qp_type(QueuePairType::ReliableConnection)
        .setup_max_send_wr(send_depth)
        .setup_max_recv_wr(1)
        .setup_max_send_sge(1)
        .setup_max_recv_sge(1)
        .setup_send_cq(cq.clone())
        .setup_recv_cq(cq.clone());
    let qp = builder.build_ex().map_err(|e| cm("creating an RC queue pair", &e))?.into();
    Ok(Connection { id, qp, cq })
}

impl Connection {
    /// Moves the QP through INIT, RTR and RTS with the attributes rdma_cm
    /// resolved (path, GID, remote QPN), overriding the path MTU if asked.
    pub(crate) fn move_to_ready_to_send(&mut self, mtu: Option<Mtu>) -> Result<(), RdmaError> {
        let cm = |what, e: &dyn StdError| RdmaError::Cm { what, why: chain(e) };
        for state in [QueuePairState::Init, QueuePairState::ReadyToReceive, QueuePairState::ReadyToSend] {
            let mut attr = self.id.get_qp_attr(state).map_err(|e| cm("reading QP attributes", &e))?;
            if state == QueuePairState::ReadyToReceive
                && let Some(m) = mtu
            {
                attr.setup_path_mtu(m);
            }
            self.qp.modify(&attr).map_err(|e| cm("moving the QP to its next state", &e))?;
        }
        Ok(())
    }

    /// Connection parameters carrying this QP's number (one outstanding
    /// RDMA READ each way: the sensor's consumer-state read).
    pub(crate) fn parameters(&self) -> ConnectionParameter {
        let mut p = ConnectionParameter::default();
        p.setup_qp_number(self.qp.qp_number());
        p
    }

    /// Waits for one completion until `timeout`, returning its work-request id.
    pub(crate) fn wait_completion(&self, timeout: Duration) -> Result<u64, RdmaError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.cq.start_poll() {
                Ok(mut poller) => {
                    if let Some(wc) = poller.next() {
                        let (id, status) = (wc.wr_id(), wc.status());
                        if status != 0 {
                            return Err(RdmaError::Connection(format!(
                                "work request {id} completed with status {status} (vendor error {:#x})",
                                wc.vendor_err()
                            )));
                        }
                        return Ok(id);
                    }
                }
                Err(sideway::ibverbs::completion::PollCompletionQueueError::CompletionQueueEmpty) => {}
                Err(e) => return Err(RdmaError::Connection(format!("polling the CQ failed: {}", chain(&e)))),
            }
            if Instant::now() >= deadline {
                return Err(RdmaError::Connection(format!(
                    "no completion within {} ms; the peer or the path stopped responding",
                    timeout.as_millis()
                )));
            }
            std::hint::spin_loop();
        }
    }
}

/// A small registered host buffer (descriptor send and receive, consumer reads).
pub(crate) struct StagingBuffer {
    /// Invariant: registered as `mr` for its whole length; never reallocated.
    pub(crate) bytes: Box<[u8]>,
    pub(crate) mr: Arc<MemoryRegion>,
}

impl StagingBuffer {
    pub(crate) fn new(pd: &Arc<ProtectionDomain>, len: usize) -> Result<Self, RdmaError> {
        let bytes = vec![0u8; len].into_boxed_slice();
        // SAFETY: the boxed slice lives as long as the region (both owned by
        // self; fields drop in order, the region after the bytes are no longer
        // used by any posted request, since requests are waited for).
        let mr = unsafe { pd.reg_mr(bytes.as_ptr() as usize, len, AccessFlags::LocalWrite) }
            .map_err(|e| RdmaError::Cm { what: "registering a staging buffer", why: chain(&e) })?;
        Ok(Self { bytes, mr })
    }

    pub(crate) fn addr(&self) -> u64 {
        self.bytes.as_ptr() as u64
    }
}

/// The appliance side of RDMA ingest: the registered ring, the rdma_cm
/// listener, and the ring's writer side (taken so that nothing else writes
/// the ring; the connected sensor is its writer).
pub struct RdmaEndpoint {
    /// Field order is drop order: connection, then regions, then the device
    /// and finally the ring memory the region covers.
    connection: Option<Connection>,
    descriptor_buf: StagingBuffer,
    region: Arc<MemoryRegion>,
    device: SidewayDevice,
    method: RegistrationMethod,
    descriptor: RingDescriptor,
    ring: Arc<FrameRing>,
    connections: u64,
}

impl RdmaEndpoint {
    /// Takes the ring's writer side and prepares the descriptor sensors
    /// receive (for a GPU ring, with the device address the region covers).
    pub fn new(
        device: SidewayDevice,
        region: Arc<MemoryRegion>,
        method: RegistrationMethod,
        ring: &Arc<FrameRing>,
    ) -> Result<Self, RdmaError> {
        if !ring.take_writer_for_remote() {
            return Err(RdmaError::WriterTaken);
        }
        let descriptor = RingDescriptor {
            ring_addr: super::remote_ring_addr(ring),
            ring_len: ring.memory().len() as u64,
            rkey: region.rkey(),
            slot_count: ring.slot_count() as u32,
            slot_stride: ring.slot_stride() as u32,
            payload_capacity: ring.payload_capacity() as u32,
            policy: ring.policy().code(),
        };
        let mut descriptor_buf = StagingBuffer::new(&device.pd, DESCRIPTOR_BYTES)?;
        descriptor_buf.bytes.copy_from_slice(&descriptor.encode());
        Ok(Self {
            connection: None,
            descriptor_buf,
            region,
            device,
            method,
            descriptor,
            ring: Arc::clone(ring),
            connections: 0,
        })
    }

    /// The address rdma_cm listens on.
    pub fn listen_addr(&self) -> SocketAddr {
        self.device.listen
    }

    /// How the ring was registered.
    pub fn method(&self) -> RegistrationMethod {
        self.method
    }

    /// Sensors accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections
    }

    /// One line for the log: device, address and registration.
    pub fn summary(&self) -> String {
        format!(
            "RDMA on {} at {}, {} ring slots registered as {} (rkey {:#x})",
            self.device.name,
            self.device.listen,
            self.ring.slot_count(),
            self.method.describe(),
            self.region.rkey()
        )
    }

    /// Serves connections until `stop` is raised: accepts one sensor at a
    /// time, sends it the ring descriptor, and forgets it when it leaves.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<(), RdmaError> {
        self.device.channel.set_nonblocking(true).map_err(|e| RdmaError::Cm {
            what: "making the event channel non-blocking",
            why: e.to_string(),
        })?;
        debug_assert!(self.device.channel.as_raw_fd() >= 0);
        while !stop.load(Ordering::Acquire) {
            let event = match self.device.channel.get_cm_event() {
                Ok(ev) => ev,
                Err(_) => {
                    std::thread::sleep(EVENT_POLL);
                    continue;
                }
            };
            let kind = event.event_type();
            let id = event.cm_id();
            let _ = event.ack();
            match (kind, id) {
                (EventType::ConnectRequest, Some(id)) => self.accept(id),
                (EventType::Established, _) => self.send_descriptor(),
                (EventType::Disconnected, _) => {
                    if let Some(c) = self.connection.take() {
                        let _ = c.id.disconnect();
                        tracing::info!("RDMA sensor disconnected");
                    }
                }
                (other, _) => tracing::debug!("rdma_cm event {other:?}"),
            }
        }
        if let Some(c) = self.connection.take() {
            let _ = c.id.disconnect();
        }
        Ok(())
    }

    fn accept(&mut self, id: Arc<Identifier>) {
        if self.connection.is_some() {
            tracing::warn!("refusing a second RDMA sensor: the ring has one writer");
            return; // dropping the id rejects the request
        }
        let attempt = create_connection(&self.device.ctx, &self.device.pd, id, 2).and_then(|mut c| {
            c.move_to_ready_to_send(self.device.mtu)?;
            c.id.accept(c.parameters()).map_err(|e| RdmaError::Cm { what: "accept", why: chain(&e) })?;
            Ok(c)
        });
        match attempt {
            Ok(c) => self.connection = Some(c),
            Err(e) => tracing::warn!("cannot accept an RDMA sensor: {e}"),
        }
    }

    fn send_descriptor(&mut self) {
        let Some(c) = self.connection.as_mut() else { return };
        let (lkey, addr) = (self.descriptor_buf.mr.lkey(), self.descriptor_buf.addr());
        let mut guard = c.qp.start_post_send();
        let wr = guard.construct_wr(WR_DESCRIPTOR, WorkRequestFlags::Signaled).setup_send();
        // SAFETY: the staging buffer is registered, DESCRIPTOR_BYTES long and
        // outlives the request (its completion is waited for below).
        unsafe { wr.setup_sge(lkey, addr, DESCRIPTOR_BYTES as u32) };
        let sent = guard
            .post()
            .map_err(|e| RdmaError::Connection(format!("posting the descriptor failed: {}", chain(&e))))
            .and_then(|()| c.wait_completion(Duration::from_secs(2)));
        match sent {
            Ok(_) => {
                self.connections += 1;
                tracing::info!(
                    "RDMA sensor connected; ring descriptor sent (rkey {:#x}, {} slots)",
                    self.descriptor.rkey,
                    self.descriptor.slot_count
                );
            }
            Err(e) => {
                tracing::warn!("dropping the RDMA sensor: {e}");
                if let Some(c) = self.connection.take() {
                    let _ = c.id.disconnect();
                }
            }
        }
    }
}
