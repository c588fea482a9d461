//! The Linux receive batch: preallocated `recvmmsg` buffers, addresses and
//! control space, the one unsafe syscall wrapper around them, what the kernel
//! said about each buffer (truncation, GRO segment size, source, receive
//! timestamp) and the split of a GRO buffer back into datagrams. With a
//! [`LandingPlan`] the receive buffers are laid out for one-copy receive
//! (headers here, payloads straight into ring slots, see [`super::landing`]).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

use super::landing::{LandingPlan, MessageLayout, message_layout};
use crate::ring::pages::{HUGE_PAGE_BYTES, OwnedPages};
use crate::wire::native::HEADER_LEN;

/// Bytes of one receive buffer: the largest UDP datagram or GRO buffer.
pub(super) const RECV_BUFFER_BYTES: usize = 65536;
/// Control-message space per buffer (a timestamp and a GRO segment size).
const CMSG_WORDS: usize = 16;

/// What the kernel said about one received buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct BufferInfo {
    /// `MSG_TRUNC`: the buffer was too small and the datagram was cut.
    pub(super) truncated: bool,
    /// GRO segment size, when the buffer holds coalesced datagrams.
    pub(super) gro_segment: Option<usize>,
    /// The sender, when the kernel gave an IPv4 or IPv6 address.
    pub(super) source: Option<SocketAddr>,
    /// Kernel receive time, or `batch_ns` when no timestamp came.
    pub(super) rx_ns: u64,
    /// The clock when the receiver got the batch from the kernel: frames
    /// completed by this buffer are published at this time (or `rx_ns`, if later).
    pub(super) batch_ns: u64,
}

/// The datagrams of one buffer: split at `segment` bytes when GRO coalesced
/// several (the last may be shorter); one datagram otherwise, even if empty.
pub(super) fn datagrams(buf: &[u8], segment: Option<usize>) -> impl Iterator<Item = &[u8]> {
    let step = segment_step(buf.len(), segment);
    let count = datagram_count(buf.len(), segment);
    (0..count).map(move |i| &buf[(i * step).min(buf.len())..((i + 1) * step).min(buf.len())])
}

/// How many datagrams [`datagrams`] cuts a buffer of `len` bytes into.
pub(super) fn datagram_count(len: usize, segment: Option<usize>) -> usize {
    len.div_ceil(segment_step(len, segment)).max(1)
}

/// The size of each datagram but the last in a buffer of `len` bytes.
fn segment_step(len: usize, segment: Option<usize>) -> usize {
    segment.filter(|&s| s > 0 && s < len).unwrap_or(len.max(1))
}

/// The receive buffers' memory: `len` zeroed bytes, every page faulted in
/// now rather than on the first `recvmmsg` into it (the first pass over a
/// lazily mapped 64-buffer batch took ~1,000 page faults inside the system
/// call), each 64 KiB buffer starting on a page boundary (a vector this
/// large starts 16 bytes into its first page, so every buffer straddled
/// one page more and began inside a cache line), and, where it spans 2 MiB,
/// in huge pages as the frame ring is ([`crate::ring::pages`]). On an H200
/// host the reading thread of `ingest.assembly_thread` (1 MiB batches)
/// spent 10-14 % less CPU per Gbit at 1,472 B with it, 5 % at 8,972 B; the
/// one-thread receiver (4 MiB, huge pages) 3 %, within the noise
/// (results archive: `bench/results/gpu-h200-2026-11-29/ingest-split/huge-buffers/`).
fn receive_memory(len: usize) -> OwnedPages {
    OwnedPages::new(len, len >= HUGE_PAGE_BYTES)
        .unwrap_or_else(|e| panic!("cannot map {len} bytes of receive buffers: {e}"))
}

/// Preallocated `recvmmsg` state: buffers, addresses, control space, headers.
pub(super) struct RecvBatch {
    /// `batch * RECV_BUFFER_BYTES` bytes, one buffer per message.
    bufs: OwnedPages,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    iovecs: Vec<libc::iovec>,
    /// Headers pointing into the vectors above; rebuilt before every call, so
    /// they never point at memory that moved.
    hdrs: Vec<libc::mmsghdr>,
    /// One-copy receive: the native header of each landing target.
    heads: Vec<[u8; HEADER_LEN]>,
    /// One-copy receive: every message's vectors, back to back.
    landing_iovecs: Vec<libc::iovec>,
    /// One-copy receive: target range of each message (empty: a plain buffer).
    groups: Vec<std::ops::Range<usize>>,
    /// One-copy receive: messages whose datagrams did not fall where
    /// predicted, gathered back into one contiguous buffer each (allocated on
    /// first use, `batch * RECV_BUFFER_BYTES`).
    linear: Option<OwnedPages>,
    /// The layout `hdrs` were last built for by [`RecvBatch::recv_landing`].
    prepared: LandingPlan,
    /// `hdrs` are as built for `prepared`: the calls since filled no message
    /// (the kernel writes a header's lengths and flags only when it fills
    /// it), and no plain receive rebuilt them.
    prepared_intact: bool,
}

// SAFETY: the raw pointers in `iovecs`/`hdrs` only point into this value's own
// heap buffers and are rewritten before every use; nothing is shared.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub(super) fn new(batch: usize) -> Self {
        // SAFETY: all-zero is a valid value of these plain C structs (null
        // pointers, zero lengths and family).
        let (storage, iov, hdr) = unsafe {
            (
                std::mem::zeroed::<libc::sockaddr_storage>(),
                std::mem::zeroed::<libc::iovec>(),
                std::mem::zeroed::<libc::mmsghdr>(),
            )
        };
        Self {
            bufs: receive_memory(batch * RECV_BUFFER_BYTES),
            addrs: vec![storage; batch],
            cmsgs: vec![[0; CMSG_WORDS]; batch],
            iovecs: vec![iov; batch],
            hdrs: vec![hdr; batch],
            heads: Vec::new(),
            landing_iovecs: Vec::new(),
            groups: vec![0..0; batch],
            linear: None,
            prepared: LandingPlan::default(),
            prepared_intact: false,
        }
    }

    /// Buffers in the batch: the most one [`RecvBatch::recv`] fills.
    pub(super) fn buffers(&self) -> usize {
        self.hdrs.len()
    }

    /// Reads up to `batch` messages without blocking; `Ok(0)` when none wait.
    pub(super) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.prepared_intact = false;
        let n = self.hdrs.len();
        for i in 0..n {
            self.iovecs[i] = libc::iovec {
                iov_base: self.bufs.bytes_mut()[i * RECV_BUFFER_BYTES..].as_mut_ptr().cast(),
                iov_len: RECV_BUFFER_BYTES,
            };
            let iov: *mut libc::iovec = &mut self.iovecs[i];
            self.prepare_header(i, iov, 1);
        }
        // SAFETY: every header points at live buffers of the sizes it states,
        // all owned by `self` and not otherwise borrowed during the call.
        unsafe { self.recvmmsg(fd, n) }
    }

    /// As [`RecvBatch::recv`], with the first `plan.groups()` messages laid
    /// out for one-copy receive: for each target of the message's group, its
    /// native header into this batch and its payload straight to the
    /// target's place in its ring slot, then a whole receive buffer for the
    /// rest, so nothing is ever cut. See [`RecvBatch::landed`] for what came.
    ///
    /// A busy-polling receiver asks again and again with the same plan
    /// while its socket stays empty: the headers built for it are then
    /// used as they are (building them took about a third of such a turn).
    pub(super) fn recv_landing(&mut self, fd: RawFd, plan: &LandingPlan) -> io::Result<usize> {
        let n = self.hdrs.len();
        if !(self.prepared_intact && self.prepared.same_layout(plan)) {
            self.prepare_landing(plan);
        }
        self.prepared_intact = false;
        // SAFETY: every header points at live vectors of the lengths it
        // states: this batch's own buffers, and `plan`'s target addresses
        // (the headers were built for them now, or for a plan with the same
        // targets at the same addresses, with no call since writing into
        // them), each valid for its target's length in a ring slot that the
        // plan's writer reserved and has not published; no Rust reference to
        // any of that memory is alive during the call.
        let received = unsafe { self.recvmmsg(fd, n) }?;
        self.prepared_intact = received == 0;
        Ok(received)
    }

    /// Builds the message headers of [`RecvBatch::recv_landing`] for `plan`.
    fn prepare_landing(&mut self, plan: &LandingPlan) {
        let n = self.hdrs.len();
        let groups = plan.groups().min(n);
        let targets = if groups == 0 { 0 } else { plan.group(groups - 1).end };
        if self.heads.len() < targets {
            self.heads.resize(targets, [0; HEADER_LEN]);
        }
        // Sized before any pointer into it is taken: it never moves below.
        self.landing_iovecs.clear();
        self.landing_iovecs.reserve(2 * targets + n);
        let mut spans = Vec::with_capacity(0);
        std::mem::swap(&mut spans, &mut self.groups);
        spans.clear();
        for i in 0..n {
            let first = self.landing_iovecs.len();
            let group = if i < groups { plan.group(i) } else { 0..0 };
            for k in group.clone() {
                self.landing_iovecs
                    .push(libc::iovec { iov_base: self.heads[k].as_mut_ptr().cast(), iov_len: HEADER_LEN });
                self.landing_iovecs
                    .push(libc::iovec { iov_base: plan.addr(k).cast(), iov_len: plan.target(k).len });
            }
            self.landing_iovecs.push(libc::iovec {
                iov_base: self.bufs.bytes_mut()[i * RECV_BUFFER_BYTES..].as_mut_ptr().cast(),
                iov_len: RECV_BUFFER_BYTES,
            });
            spans.push(group);
            let iovlen = self.landing_iovecs.len() - first;
            let iov = self.landing_iovecs[first..].as_mut_ptr();
            self.prepare_header(i, iov, iovlen);
        }
        self.groups = spans;
        self.prepared.copy_layout(plan);
    }

    /// Message header `i` set to receive into the `iovlen` vectors at `iov`,
    /// with this batch's address and control buffers.
    fn prepare_header(&mut self, i: usize, iov: *mut libc::iovec, iovlen: usize) {
        let m = &mut self.hdrs[i];
        m.msg_len = 0;
        m.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
        m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        m.msg_hdr.msg_iov = iov;
        m.msg_hdr.msg_iovlen = iovlen as _;
        m.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
        m.msg_hdr.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
        m.msg_hdr.msg_flags = 0;
    }

    /// `recvmmsg` of the first `n` prepared headers without blocking;
    /// `Ok(0)` when nothing waits (or a signal came first).
    ///
    /// # Safety
    /// Every vector of those headers points at memory valid for its length
    /// and not otherwise accessed until the call returns.
    unsafe fn recvmmsg(&mut self, fd: RawFd, n: usize) -> io::Result<usize> {
        // SAFETY: the headers are this batch's own, their address and control
        // buffers too; the caller guarantees the vectors they point at.
        let rc = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return match e.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(e),
            };
        }
        Ok(rc as usize)
    }

    /// Where message `i` of the last [`RecvBatch::recv_landing`] put its
    /// datagrams (`gro_segment` from [`RecvBatch::message`]'s info).
    /// Reads nothing from the ring slots.
    pub(super) fn landed(&self, i: usize, plan: &LandingPlan, gro_segment: Option<usize>) -> MessageLayout {
        let group = self.groups[i].clone();
        let len = self.hdrs[i].msg_len as usize;
        message_layout(len, gro_segment, group.clone().map(|k| plan.target(k).datagram_bytes()), |j| {
            self.heads[group.start + j]
        })
    }

    /// The landing targets message `i` of the last one-copy receive was laid out for.
    pub(super) fn group(&self, i: usize) -> std::ops::Range<usize> {
        self.groups[i].clone()
    }

    /// Message `i` as [`RecvBatch::gather`] put it together.
    pub(super) fn gathered(&self, i: usize) -> &[u8] {
        let total = (self.hdrs[i].msg_len as usize).min(RECV_BUFFER_BYTES);
        &self.linear.as_ref().map_or(&[][..], OwnedPages::bytes)
            [i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + total]
    }

    /// The header of landing target `k` as the last receive wrote it.
    pub(super) fn head(&self, k: usize) -> &[u8; HEADER_LEN] {
        &self.heads[k]
    }

    /// The first `len` bytes of message `i`'s plain receive buffer (what came
    /// after its landing targets).
    pub(super) fn tail(&self, i: usize, len: usize) -> &[u8] {
        &self.bufs.bytes()[i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + len.min(RECV_BUFFER_BYTES)]
    }

    /// Gathers message `i` of the last [`RecvBatch::recv_landing`] back
    /// into one contiguous buffer, when its datagrams did not fall where
    /// predicted. Must run before anything writes to the plan's slots.
    pub(super) fn gather(&mut self, i: usize, plan: &LandingPlan) -> &[u8] {
        let buffers = self.hdrs.len();
        let linear = self.linear.get_or_insert_with(|| receive_memory(buffers * RECV_BUFFER_BYTES));
        let total = (self.hdrs[i].msg_len as usize).min(RECV_BUFFER_BYTES);
        let out = &mut linear.bytes_mut()[i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + total];
        let mut at = 0;
        for k in self.groups[i].clone() {
            let head = &self.heads[k][..HEADER_LEN.min(total - at)];
            out[at..at + head.len()].copy_from_slice(head);
            at += head.len();
            let n = plan.target(k).len.min(total - at);
            // SAFETY: the target's address is valid for its length in a ring
            // slot reserved by the plan's writer and not yet published, and
            // nothing has written it since the receive (see the doc); no
            // mutable reference to it is alive.
            let landed = unsafe { std::slice::from_raw_parts(plan.addr(k).cast_const(), n) };
            out[at..at + n].copy_from_slice(landed);
            at += n;
        }
        let rest = total - at;
        out[at..].copy_from_slice(&self.bufs.bytes()[i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + rest]);
        self.gathered(i)
    }

    /// The bytes and kernel facts of message `i` of the last [`RecvBatch::recv`],
    /// which returned at `batch_ns`.
    pub(super) fn message(&self, i: usize, batch_ns: u64) -> (&[u8], BufferInfo) {
        (self.bytes(i), self.info(i, batch_ns))
    }

    /// The bytes of message `i` of the last [`RecvBatch::recv`].
    pub(super) fn bytes(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(RECV_BUFFER_BYTES);
        &self.bufs.bytes()[i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + len]
    }

    /// The kernel facts of message `i` of the last [`RecvBatch::recv`],
    /// which returned at `batch_ns`.
    pub(super) fn info(&self, i: usize, batch_ns: u64) -> BufferInfo {
        let m = &self.hdrs[i];
        let mut info = BufferInfo {
            truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            gro_segment: None,
            source: source_addr(&self.addrs[i], m.msg_hdr.msg_namelen),
            rx_ns: 0,
            batch_ns,
        };
        let mut rx_ns = None;
        // SAFETY: the kernel filled `msg_control` up to `msg_controllen`, and
        // the CMSG_* helpers stay inside that span; each payload is read
        // unaligned at the size its level/type pair defines.
        unsafe {
            let mut c = libc::CMSG_FIRSTHDR(&m.msg_hdr);
            while !c.is_null() {
                let data = libc::CMSG_DATA(c);
                match ((*c).cmsg_level, (*c).cmsg_type) {
                    (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                        let ts = std::ptr::read_unaligned(data as *const libc::timespec);
                        rx_ns = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
                    }
                    (libc::SOL_UDP, libc::UDP_GRO) => {
                        let segment = std::ptr::read_unaligned(data as *const libc::c_int);
                        info.gro_segment = usize::try_from(segment).ok();
                    }
                    _ => {}
                }
                c = libc::CMSG_NXTHDR(&m.msg_hdr, c);
            }
        }
        // Without a kernel timestamp the batch's clock reading stands in (one
        // read per batch, not one per datagram).
        info.rx_ns = rx_ns.unwrap_or(batch_ns);
        info
    }
}

/// The sender's address from a filled `sockaddr_storage`.
fn source_addr(addr: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match addr.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family and length say the storage holds a sockaddr_in,
            // and sockaddr_storage is large and aligned enough for it.
            let sin = unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            // `s_addr` and `sin_port` are in network order, so their memory bytes
            // are the octets and the big-endian port.
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: as above, for sockaddr_in6.
            let sin6 = unsafe { &*(addr as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            let port = u16::from_be(sin6.sin6_port);
            Some(SocketAddr::V6(SocketAddrV6::new(ip, port, sin6.sin6_flowinfo, sin6.sin6_scope_id)))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::landing::LandingTarget;

    /// `addr` as the kernel writes it into a `sockaddr_storage`, and its length.
    fn storage_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        let sa = socket2::SockAddr::from(addr);
        // SAFETY: a SockAddr holds a whole, initialised sockaddr_storage.
        (unsafe { sa.as_ptr().cast::<libc::sockaddr_storage>().read_unaligned() }, sa.len())
    }

    #[test]
    fn receive_buffers_are_faulted_in_before_the_first_receive() {
        let len = 8 * RECV_BUFFER_BYTES;
        let lazy = vec![0u8; len];
        if crate::ring::memory::resident_pages(lazy.as_ptr(), len) >= len / 4096 {
            // The allocator handed back memory already mapped (other tests
            // ran in this process): a plain vector shows nothing to compare.
            eprintln!("skipped: a plain zeroed vector came back resident");
            return;
        }
        drop(lazy);
        let batch = RecvBatch::new(8);
        let (ptr, len) = (batch.bufs.bytes().as_ptr(), batch.bufs.bytes().len());
        let pages = crate::ring::memory::resident_pages(ptr, len);
        assert!(pages >= len / 4096, "{pages} of {} pages resident", len / 4096);
        assert!(batch.bufs.bytes().iter().all(|&b| b == 0));
    }

    #[test]
    fn receive_buffers_start_on_page_and_huge_page_boundaries() {
        for (buffers, align) in
            [(1, 4096), (16, 4096), (32, crate::ring::pages::HUGE_PAGE_BYTES), (64, 2 << 20)]
        {
            let batch = RecvBatch::new(buffers);
            let bytes = batch.bufs.bytes();
            assert_eq!(bytes.len(), buffers * RECV_BUFFER_BYTES);
            assert!(
                (bytes.as_ptr() as usize).is_multiple_of(align),
                "{buffers} buffers: {:p}",
                bytes.as_ptr()
            );
        }
    }

    /// A plan of one target: `len` payload bytes at `slot`.
    fn one_target(slot: &mut [u8], len: usize) -> LandingPlan {
        let mut plan = LandingPlan::default();
        plan.push(LandingTarget { ring_seq: 1, offset: 0, len }, slot.as_mut_ptr());
        plan.end_group();
        plan
    }

    #[test]
    fn headers_built_for_a_plan_serve_the_same_plan_until_a_message_fills() {
        use std::net::UdpSocket;
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&rx);
        let mut batch = RecvBatch::new(4);
        let (mut first, mut second) = (vec![0u8; 100], vec![0u8; 100]);
        let datagram = |fill: u8| {
            let mut d = vec![0u8; HEADER_LEN + 100];
            d[..HEADER_LEN].fill(0xaa);
            d[HEADER_LEN..].fill(fill);
            d
        };
        // Empty reads with one plan: built once, then used as they are.
        let plan = one_target(&mut first, 100);
        assert_eq!(batch.recv_landing(fd, &plan).unwrap(), 0);
        assert!(batch.prepared_intact);
        assert_eq!(batch.recv_landing(fd, &plan).unwrap(), 0);
        assert!(batch.prepared_intact && batch.prepared.same_layout(&plan));
        // A datagram arriving then lands where the plan says.
        tx.send(&datagram(7)).unwrap();
        let got = (0..1000).map(|_| batch.recv_landing(fd, &plan).unwrap()).find(|&n| n > 0);
        assert_eq!(got, Some(1));
        assert!(first.iter().all(|&b| b == 7), "the payload landed at the first place");
        assert_eq!(batch.head(0), &[0xaa; HEADER_LEN]);
        assert!(!batch.prepared_intact, "a filled message's lengths changed: rebuild next time");
        // Another plan (another place) gets headers of its own.
        let plan = one_target(&mut second, 100);
        tx.send(&datagram(9)).unwrap();
        let got = (0..1000).map(|_| batch.recv_landing(fd, &plan).unwrap()).find(|&n| n > 0);
        assert_eq!(got, Some(1));
        assert!(second.iter().all(|&b| b == 9) && first.iter().all(|&b| b == 7));
        // A plain receive rebuilds the headers for plain buffers.
        assert_eq!(batch.recv(fd).unwrap(), 0);
        assert!(!batch.prepared_intact);
    }

    #[test]
    fn source_addresses_keep_their_port() {
        for addr in ["127.0.0.1:40123", "[fd00::7]:6001"] {
            let want: SocketAddr = addr.parse().unwrap();
            let (storage, len) = storage_of(want);
            assert_eq!(source_addr(&storage, len), Some(want));
            assert_eq!(source_addr(&storage, 4), None, "a length too short for the family");
        }
    }
}
