//! The Linux receive batch: preallocated `recvmmsg` buffers, addresses and
//! control space, the one unsafe syscall wrapper around them, what the kernel
//! said about each buffer (truncation, GRO segment size, source, receive
//! timestamp) and the split of a GRO buffer back into datagrams.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

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
    let step = segment.filter(|&s| s > 0 && s < buf.len()).unwrap_or(buf.len().max(1));
    let count = buf.len().div_ceil(step).max(1);
    (0..count).map(move |i| &buf[(i * step).min(buf.len())..((i + 1) * step).min(buf.len())])
}

/// `buf` with every page written once, so that the kernel maps it now and not
/// on the first `recvmmsg` into it: a zeroed `Vec` is mapped lazily, and the
/// first pass over a 64-buffer batch (4 MiB) took ~1,000 page faults inside
/// the receive system call. `black_box` keeps the compiler from dropping the
/// stores as writes of zero to memory it knows is zero.
fn touched(mut buf: Vec<u8>) -> Vec<u8> {
    buf = std::hint::black_box(buf);
    for page in buf.chunks_mut(4096) {
        page[0] = 0;
    }
    buf
}

/// Preallocated `recvmmsg` state: buffers, addresses, control space, headers.
pub(super) struct RecvBatch {
    /// `batch * RECV_BUFFER_BYTES` bytes, one buffer per message.
    bufs: Vec<u8>,
    addrs: Vec<libc::sockaddr_storage>,
    cmsgs: Vec<[u64; CMSG_WORDS]>,
    iovecs: Vec<libc::iovec>,
    /// Headers pointing into the vectors above; rebuilt before every call, so
    /// they never point at memory that moved.
    hdrs: Vec<libc::mmsghdr>,
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
            bufs: touched(vec![0; batch * RECV_BUFFER_BYTES]),
            addrs: vec![storage; batch],
            cmsgs: vec![[0; CMSG_WORDS]; batch],
            iovecs: vec![iov; batch],
            hdrs: vec![hdr; batch],
        }
    }

    /// Buffers in the batch: the most one [`RecvBatch::recv`] fills.
    pub(super) fn buffers(&self) -> usize {
        self.hdrs.len()
    }

    /// Reads up to `batch` messages without blocking; `Ok(0)` when none wait.
    pub(super) fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        let n = self.hdrs.len();
        for i in 0..n {
            self.iovecs[i] = libc::iovec {
                iov_base: self.bufs[i * RECV_BUFFER_BYTES..].as_mut_ptr().cast(),
                iov_len: RECV_BUFFER_BYTES,
            };
            let m = &mut self.hdrs[i];
            m.msg_len = 0;
            m.msg_hdr.msg_name = (&mut self.addrs[i] as *mut libc::sockaddr_storage).cast();
            m.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            m.msg_hdr.msg_iov = &mut self.iovecs[i];
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = self.cmsgs[i].as_mut_ptr().cast();
            m.msg_hdr.msg_controllen = size_of::<[u64; CMSG_WORDS]>() as _;
            m.msg_hdr.msg_flags = 0;
        }
        // SAFETY: every header points at live buffers of the sizes it states,
        // all owned by `self` and not otherwise borrowed during the call.
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

    /// The bytes and kernel facts of message `i` of the last [`RecvBatch::recv`],
    /// which returned at `batch_ns`.
    pub(super) fn message(&self, i: usize, batch_ns: u64) -> (&[u8], BufferInfo) {
        let m = &self.hdrs[i];
        let len = (m.msg_len as usize).min(RECV_BUFFER_BYTES);
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
        (&self.bufs[i * RECV_BUFFER_BYTES..i * RECV_BUFFER_BYTES + len], info)
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

    /// `addr` as the kernel writes it into a `sockaddr_storage`, and its length.
    fn storage_of(addr: SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
        let sa = socket2::SockAddr::from(addr);
        // SAFETY: a SockAddr holds a whole, initialised sockaddr_storage.
        (unsafe { sa.as_ptr().cast::<libc::sockaddr_storage>().read_unaligned() }, sa.len())
    }

    #[test]
    fn receive_buffers_are_faulted_in_before_the_first_receive() {
        let batch = RecvBatch::new(8);
        let (ptr, len) = (batch.bufs.as_ptr(), batch.bufs.len());
        let pages = crate::ring::memory::resident_pages(ptr, len);
        assert!(pages >= len / 4096, "{pages} of {} pages resident", len / 4096);
        assert!(batch.bufs.iter().all(|&b| b == 0));
        let lazy = vec![0u8; len];
        assert!(
            crate::ring::memory::resident_pages(lazy.as_ptr(), len) < len / 4096,
            "a plain zeroed vector is faulted in lazily (else this test shows nothing)"
        );
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
