//! The consumer side: attach to a running appliance's output socket, map
//! its output ring and read each output in place.
//!
//! [`Consumer::next`] hands out outputs in sequence order. It checks the
//! slot's sequence word before and after copying the record; an output
//! already overwritten (the consumer fell more than `slots` behind, or the
//! writer came round while it looked) is counted in [`Consumer::lost`] and
//! skipped, never handed out torn. The samples are read in place: check
//! [`OutputFrame::is_intact`] after using them. A frame whose slot was
//! rewritten while it was held counts as lost when it is dropped, so
//! `read() + lost()` is every output published since the attach.

use super::OutputError;
use super::cuda::IpcMapping;
use super::handshake::{AttachRequest, HELLO_BYTES, Hello};
use super::layout::*;
use super::memory::{OutputMemory, SharedHostMemory};
use crate::ring::ResultRecord;
use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
use std::io::{IoSliceMut, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

/// How long [`Consumer::attach`] waits for the appliance's hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

/// The chain output of a device-resident ring: what a DLPack capsule wraps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceSamples {
    /// Device address of the first `f32` (in this process's CUDA context).
    pub dptr: u64,
    /// Samples.
    pub len: usize,
    /// CUDA device ordinal.
    pub device_ordinal: i32,
}

/// Where one slot's samples are in this process: the whole slot, its
/// `sample_capacity` samples, whatever output it holds now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotSamples {
    /// A host address in this process's mapping of the ring.
    Host {
        /// The first sample's address.
        address: u64,
        /// Bytes the slot's samples span.
        len: usize,
    },
    /// A device address in this process's CUDA context.
    Device(DeviceSamples),
}

/// The data region as this process sees it.
enum DataView {
    Host(SharedHostMemory),
    /// Device memory opened from the appliance's CUDA IPC handle.
    Device {
        mapping: IpcMapping,
        device_ordinal: i32,
    },
    /// The device memory of a ring this process serves itself, addressed
    /// directly (a CUDA IPC handle cannot be opened by the process that
    /// exported it); `ring` keeps it allocated.
    LocalDevice {
        _ring: std::sync::Arc<super::OutputRing>,
        dptr: u64,
        device_ordinal: i32,
    },
}

/// A process attached to an appliance's output ring.
pub struct Consumer {
    /// Kept open: closing it detaches this consumer; the appliance closing
    /// it means the appliance stopped.
    stream: UnixStream,
    control: SharedHostMemory,
    data: DataView,
    geometry: OutputGeometry,
    /// This consumer's line in the control block (< MAX_CONSUMERS).
    index: usize,
    next_seq: u64,
    read: u64,
    lost: u64,
    /// How long a wait spins on the head before it sleeps between polls.
    spin: Duration,
}

/// How long [`Consumer::next_timeout`] spins before sleeping, by default.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(20);
/// The sleep between two polls once the spin budget is spent.
const POLL_SLEEP: Duration = Duration::from_micros(20);

impl Consumer {
    /// Connects to the output socket at `path` and maps the ring it serves.
    /// Only outputs published after the attach are read.
    pub fn attach(path: impl AsRef<Path>) -> Result<Self, OutputError> {
        Self::attach_as(path.as_ref(), AttachRequest::current())
    }

    fn attach_as(path: &Path, request: AttachRequest) -> Result<Self, OutputError> {
        let connect = |source| OutputError::Connect { path: path.to_owned(), source };
        let mut stream = UnixStream::connect(path).map_err(connect)?;
        stream.set_read_timeout(Some(HELLO_TIMEOUT)).map_err(connect)?;
        stream.write_all(&request.encode()).map_err(connect)?;
        let (hello, fds) = receive_hello(&stream)?;
        let Hello::Accepted { version, kind, geometry, device_ordinal, consumer_index, fd_count, ipc_handle } =
            Hello::decode(&hello)?
        else {
            let Ok(Hello::Refused(reason)) = Hello::decode(&hello) else { unreachable!("decoded above") };
            return Err(OutputError::Refused(reason));
        };
        if version != OUTPUT_LAYOUT_VERSION {
            return Err(OutputError::Refused(format!(
                "the appliance serves output layout version {version}, this consumer reads version {OUTPUT_LAYOUT_VERSION}; \
                 use a frameloop consumer of the same release as the appliance"
            )));
        }
        let index = consumer_index as usize;
        if index >= MAX_CONSUMERS || fds.len() != fd_count as usize {
            return Err(OutputError::Handshake(format!(
                "the hello names consumer line {index} and {fd_count} descriptors but {} arrived",
                fds.len()
            )));
        }
        let mut fds = fds.into_iter();
        let too_few = || OutputError::Handshake("the hello came without the region descriptors".into());
        let control_bytes = geometry.control_bytes().ok_or_else(too_few)?;
        let control = SharedHostMemory::open(fds.next().ok_or_else(too_few)?, control_bytes)?;
        check_control(&control, &geometry)?;
        let data = match kind {
            MemoryKind::HostMemfd => {
                let bytes = geometry.data_bytes().ok_or_else(too_few)?;
                DataView::Host(SharedHostMemory::open(fds.next().ok_or_else(too_few)?, bytes)?)
            }
            MemoryKind::CudaDevice => {
                DataView::Device { mapping: IpcMapping::open(&ipc_handle, device_ordinal)?, device_ordinal }
            }
        };
        Ok(Self::admitted(stream, control, data, geometry, index))
    }

    /// The reader of consumer line `index`, admitted by the appliance:
    /// it starts after the output the appliance admitted it at, not at the
    /// head seen now, since outputs published while the ring was being
    /// mapped belong to this consumer too.
    fn admitted(
        stream: UnixStream,
        control: SharedHostMemory,
        data: DataView,
        geometry: OutputGeometry,
        index: usize,
    ) -> Self {
        let mut consumer = Self {
            stream,
            control,
            data,
            geometry,
            index,
            next_seq: 0,
            read: 0,
            lost: 0,
            spin: DEFAULT_SPIN,
        };
        let word = consumer.consumer_word();
        debug_assert_ne!(word.attached.load(Ordering::Acquire), 0, "admitted before it was mapped");
        consumer.next_seq = word.last_read_seq.load(Ordering::Acquire) + 1;
        consumer
    }

    /// Attaches to the output ring `server` serves in this process (an
    /// appliance started in this process) without its socket: the same
    /// reader as [`Consumer::attach`], over the same memory, with no
    /// connection to make. A ring in device memory is addressed directly in
    /// the appliance's CUDA context; [`OutputFrame::copy_samples`] is then
    /// refused (copy on the device). Only outputs published after the
    /// attach are read.
    pub fn attach_local(server: &super::OutputServer) -> Result<Self, OutputError> {
        let ring = std::sync::Arc::clone(server.ring());
        let geometry = ring.geometry();
        let share = |region: super::memory::SharedRegion<'_>, bytes: Option<usize>| {
            let super::memory::SharedRegion::HostFd(fd) = region else {
                return Err(OutputError::Handshake("a host region without a descriptor".into()));
            };
            let fd = fd
                .try_clone_to_owned()
                .map_err(|source| OutputError::Memory { what: "duplicate the ring's descriptor", source })?;
            let bytes = bytes.ok_or(OutputError::BadGeometry {
                slots: geometry.slot_count,
                sample_capacity: geometry.sample_capacity,
            })?;
            SharedHostMemory::open(fd, bytes)
        };
        let control = share(ring.control().share(), geometry.control_bytes())?;
        check_control(&control, &geometry)?;
        let data = match ring.data().device_ptr() {
            Some((dptr, device_ordinal)) => {
                DataView::LocalDevice { _ring: std::sync::Arc::clone(&ring), dptr, device_ordinal }
            }
            None => DataView::Host(share(ring.data().share(), geometry.data_bytes())?),
        };
        let (stream, index) = server.attach_local()?;
        Ok(Self::admitted(stream, control, data, geometry, index))
    }

    /// The ring's shape (slots, stride, samples per slot), as the hello gave it.
    pub fn geometry(&self) -> OutputGeometry {
        self.geometry
    }

    /// Where the samples live.
    pub fn memory_kind(&self) -> MemoryKind {
        match self.data {
            DataView::Host(_) => MemoryKind::HostMemfd,
            DataView::Device { .. } | DataView::LocalDevice { .. } => MemoryKind::CudaDevice,
        }
    }

    fn header(&self) -> &ControlHeader {
        // SAFETY: the control block is at least `control_bytes` long and
        // starts with the header (checked by `check_control`); the fields
        // that change are atomics.
        unsafe { &*(self.control.as_ptr() as *const ControlHeader) }
    }

    fn slot_word(&self, seq: u64) -> &AtomicU64 {
        // SAFETY: the slot index is below `slot_count`; the control block
        // holds `slot_count` words at SLOT_SEQS_OFFSET (its length was checked).
        unsafe {
            &*(self.control.as_ptr().add(SLOT_SEQS_OFFSET) as *const AtomicU64)
                .add(self.geometry.slot_index(seq))
        }
    }

    fn consumer_word(&self) -> &ConsumerWord {
        let offset = self.geometry.consumers_offset().unwrap_or(0);
        // SAFETY: `index < MAX_CONSUMERS` (checked at attach) and the control
        // block holds MAX_CONSUMERS words at `consumers_offset`.
        unsafe { &*(self.control.as_ptr().add(offset) as *const ConsumerWord).add(self.index) }
    }

    /// Newest published output sequence.
    pub fn head(&self) -> u64 {
        self.header().head_seq.load(Ordering::Acquire)
    }

    /// Slot `index`'s samples (all `sample_capacity` of them), `None` when
    /// `index` is not a slot. Output `s` lives in slot
    /// [`OutputFrame::slot`]; a view made once per slot (a tensor over each)
    /// serves every output that slot will hold, without a new export per
    /// output. What the samples are is only known through a frame: use the
    /// first `len()` of them, then check [`OutputFrame::is_intact`].
    pub fn slot_samples(&self, index: usize) -> Option<SlotSamples> {
        if index >= self.geometry.slot_count {
            return None;
        }
        let offset = index * self.geometry.slot_stride + SLOT_SAMPLES_OFFSET;
        let len = self.geometry.sample_capacity;
        Some(match &self.data {
            DataView::Host(mem) => SlotSamples::Host { address: mem.as_ptr() as u64 + offset as u64, len },
            DataView::Device { mapping, device_ordinal } => SlotSamples::Device(DeviceSamples {
                dptr: mapping.dptr() + offset as u64,
                len,
                device_ordinal: *device_ordinal,
            }),
            DataView::LocalDevice { dptr, device_ordinal, .. } => SlotSamples::Device(DeviceSamples {
                dptr: dptr + offset as u64,
                len,
                device_ordinal: *device_ordinal,
            }),
        })
    }

    /// Outputs handed out whole.
    pub fn read(&self) -> u64 {
        self.read
    }

    /// Outputs published since the attach that this consumer lost: overwritten
    /// before it got to them, or while it held them.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// True when the appliance closed the connection (it stopped, or
    /// dropped this consumer): no new outputs will come.
    pub fn appliance_gone(&self) -> bool {
        let mut byte = [0u8; 1];
        let flags = MsgFlags::MSG_PEEK | MsgFlags::MSG_DONTWAIT;
        matches!(nix::sys::socket::recv(self.stream.as_raw_fd(), &mut byte, flags), Ok(0))
    }

    /// True when an output newer than the last one handed out is published.
    pub fn ready(&self) -> bool {
        self.head() >= self.next_seq
    }

    /// True while the slot of output `seq` still holds it (the writer has not
    /// come round to rewrite it): what a binding that keeps a frame's
    /// samples past its [`OutputFrame`] checks before trusting them.
    pub fn holds(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        fence(Ordering::Acquire);
        self.slot_word(seq).load(Ordering::Relaxed) == written_word(seq)
    }

    /// The next output, or `None` when none is published yet. Never blocks.
    // Not `Iterator::next`: a frame borrows the consumer (a lending iterator).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Option<OutputFrame<'_>> {
        let slots = self.geometry.slot_count as u64;
        loop {
            let head = self.head();
            if head < self.next_seq {
                return None;
            }
            if head - self.next_seq >= slots {
                let oldest = head - slots + 1;
                self.lost += oldest - self.next_seq;
                self.next_seq = oldest;
            }
            let seq = self.next_seq;
            self.next_seq += 1;
            if self.slot_word(seq).load(Ordering::Acquire) != written_word(seq) {
                self.lost += 1;
                continue;
            }
            let head = self.copy_head(seq);
            let (record, user) = (head.record, head.user);
            fence(Ordering::Acquire);
            if self.slot_word(seq).load(Ordering::Relaxed) != written_word(seq) {
                self.lost += 1;
                continue;
            }
            return Some(OutputFrame { consumer: self, seq, record, user });
        }
    }

    /// Sets how long [`Consumer::next_timeout`] spins on the head before it
    /// sleeps 20 µs between polls ([`DEFAULT_SPIN`] unless set). A consumer
    /// that must see each output as soon as it is published spins for as
    /// long as it waits (`Duration::MAX`) and keeps a core busy doing so.
    pub fn set_spin(&mut self, spin: Duration) {
        self.spin = spin;
    }

    /// The next output, polling until `timeout` passes: spinning for the
    /// spin budget ([`Consumer::set_spin`]), then sleeping between polls.
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<OutputFrame<'_>> {
        let start = Instant::now();
        while !self.ready() {
            let waited = start.elapsed();
            if waited >= timeout {
                break;
            }
            if waited < self.spin {
                std::hint::spin_loop();
            } else {
                std::thread::sleep(POLL_SLEEP.min(timeout - waited));
            }
        }
        self.next()
    }

    /// Copies the slot head of `seq`'s slot from the control block (host
    /// memory for every kind of ring: no device copy).
    fn copy_head(&self, seq: u64) -> SlotHead {
        let offset = self.geometry.heads_offset().unwrap_or(0);
        // SAFETY: the control block holds `slot_count` heads at
        // `heads_offset` (its length, `control_bytes`, was checked at attach)
        // and the index is below `slot_count`; a concurrent rewrite is
        // detected by the caller's re-check and the copy is then discarded
        // unseen.
        unsafe {
            std::ptr::read_volatile(
                (self.control.as_ptr().add(offset) as *const SlotHead).add(self.geometry.slot_index(seq)),
            )
        }
    }

    fn slot_host_ptr(&self, seq: u64) -> Option<*const u8> {
        match &self.data {
            // SAFETY: `slot_offset < data_bytes`, the mapped length (checked at open).
            DataView::Host(mem) => Some(unsafe { mem.as_ptr().add(self.geometry.slot_offset(seq)) }),
            DataView::Device { .. } | DataView::LocalDevice { .. } => None,
        }
    }
}

/// Checks that the control block describes the geometry the hello promised.
fn check_control(control: &SharedHostMemory, geometry: &OutputGeometry) -> Result<(), OutputError> {
    // SAFETY: `open` mapped at least `control_bytes >= 128` bytes.
    let h = unsafe { &*(control.as_ptr() as *const ControlHeader) };
    let same = h.magic == OUTPUT_MAGIC
        && h.version == OUTPUT_LAYOUT_VERSION
        && h.slot_count as usize == geometry.slot_count
        && h.slot_stride as usize == geometry.slot_stride
        && h.sample_capacity as usize == geometry.sample_capacity
        && Some(h.consumers_offset as usize) == geometry.consumers_offset()
        && Some(h.heads_offset as usize) == geometry.heads_offset();
    if same {
        Ok(())
    } else {
        Err(OutputError::Handshake("the control block does not match the hello's geometry".into()))
    }
}

/// Reads the hello and the descriptors that come with it.
fn receive_hello(stream: &UnixStream) -> Result<([u8; HELLO_BYTES], Vec<OwnedFd>), OutputError> {
    let mut hello = [0u8; HELLO_BYTES];
    let mut got = 0;
    let mut fds = Vec::new();
    while got < HELLO_BYTES {
        let mut cmsg = nix::cmsg_space!([RawFd; 4]);
        let mut iov = [IoSliceMut::new(&mut hello[got..])];
        let msg = recvmsg::<()>(stream.as_raw_fd(), &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)
            .map_err(|e| {
                OutputError::Handshake(format!("no hello from the appliance within {HELLO_TIMEOUT:?}: {e}"))
            })?;
        for c in msg.cmsgs().map_err(|e| OutputError::Handshake(e.to_string()))? {
            if let ControlMessageOwned::ScmRights(received) = c {
                // SAFETY: the kernel just installed these descriptors in this
                // process for this message; nothing else owns them.
                fds.extend(received.into_iter().map(|fd| unsafe { OwnedFd::from_raw_fd(fd) }));
            }
        }
        if msg.bytes == 0 {
            return Err(OutputError::Handshake(
                "the appliance closed the connection before its hello".into(),
            ));
        }
        got += msg.bytes;
    }
    Ok((hello, fds))
}

/// One output, read in place. Dropping it reports its sequence to the
/// appliance (for lag) and counts it read, or lost if its slot was
/// rewritten while it was held.
pub struct OutputFrame<'a> {
    consumer: &'a mut Consumer,
    seq: u64,
    record: ResultRecord,
    user: [u32; USER_RESULT_WORDS],
}

impl OutputFrame<'_> {
    /// Output sequence (1-based, contiguous over the appliance's run).
    pub fn sequence(&self) -> u64 {
        self.seq
    }

    /// Index of the slot that holds this output (see [`Consumer::slot_samples`]).
    pub fn slot(&self) -> usize {
        self.consumer.geometry.slot_index(self.seq)
    }

    /// The frame's result record: timestamps, stats, threshold count.
    pub fn record(&self) -> &ResultRecord {
        &self.record
    }

    /// The user result words a user kernel wrote (zero on the host backend).
    pub fn user_result(&self) -> &[u32; USER_RESULT_WORDS] {
        &self.user
    }

    /// Samples in the slot (the record's `output_len`, at most the capacity).
    pub fn len(&self) -> usize {
        (self.record.output_len as usize).min(self.consumer.geometry.sample_capacity)
    }

    /// Whether the output holds no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The chain's final samples, in place in the shared ring; `None` for a
    /// device-memory ring (see [`OutputFrame::device_samples`]). The writer
    /// rewrites the slot once it comes round, without waiting: check
    /// [`OutputFrame::is_intact`] after using the samples.
    pub fn samples(&self) -> Option<&[f32]> {
        let slot = self.consumer.slot_host_ptr(self.seq)?;
        // SAFETY: `len() <= sample_capacity` samples at SLOT_SAMPLES_OFFSET lie
        // inside the slot, 256-byte aligned; the bytes are in a shared
        // mapping that lives as long as the consumer this frame borrows.
        // The writer may rewrite them concurrently, which `is_intact` reports.
        Some(unsafe { std::slice::from_raw_parts(slot.add(SLOT_SAMPLES_OFFSET) as *const f32, self.len()) })
    }

    /// The samples of a device-memory ring, `None` for a host ring.
    pub fn device_samples(&self) -> Option<DeviceSamples> {
        let (base, device_ordinal) = match &self.consumer.data {
            DataView::Host(_) => return None,
            DataView::Device { mapping, device_ordinal } => (mapping.dptr(), device_ordinal),
            DataView::LocalDevice { dptr, device_ordinal, .. } => (*dptr, device_ordinal),
        };
        let offset = (self.consumer.geometry.slot_offset(self.seq) + SLOT_SAMPLES_OFFSET) as u64;
        Some(DeviceSamples { dptr: base + offset, len: self.len(), device_ordinal: *device_ordinal })
    }

    /// A copy of the samples, from either kind of ring (a device-to-host copy
    /// for a device-memory ring). Check [`OutputFrame::is_intact`] after it.
    pub fn copy_samples(&self) -> Result<Vec<f32>, OutputError> {
        let mapping = match &self.consumer.data {
            DataView::Host(_) => return Ok(self.samples().unwrap_or_default().to_vec()),
            DataView::Device { mapping, .. } => mapping,
            DataView::LocalDevice { .. } => {
                return Err(OutputError::LocalDeviceCopy);
            }
        };
        let mut bytes = vec![0u8; self.len() * 4];
        let offset = self.consumer.geometry.slot_offset(self.seq) + SLOT_SAMPLES_OFFSET;
        // Inside the region: `len() <= sample_capacity` samples at SLOT_SAMPLES_OFFSET of a slot.
        mapping.read(offset, &mut bytes)?;
        Ok(bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect())
    }

    /// True while the slot still holds this output (not rewritten since `next`).
    pub fn is_intact(&self) -> bool {
        fence(Ordering::Acquire);
        self.consumer.slot_word(self.seq).load(Ordering::Relaxed) == written_word(self.seq)
    }
}

impl Drop for OutputFrame<'_> {
    fn drop(&mut self) {
        if self.is_intact() {
            self.consumer.read += 1;
        } else {
            self.consumer.lost += 1;
        }
        self.consumer.consumer_word().last_read_seq.store(self.seq, Ordering::Relaxed);
    }
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
