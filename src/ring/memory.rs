//! Memory that backs a ring: a trait for "bytes the consumer can address",
//! the plain host implementation (anonymous `memmap2` mapping), and the
//! copy interface of memory only a device can address (a GPU-memory ring
//! that a NIC writes), whose bytes the host reaches by ordered copies.

use super::pages::RingPages;
use thiserror::Error;

/// A zero-initialised, fixed allocation that a ring lives in.
///
/// # Safety
/// Implementors guarantee that the allocation is `len()` bytes, never moves
/// while the value lives, and that `device_ptr()` (when `Some`) addresses
/// the very same bytes from the GPU. When `device_copies()` is `None` the
/// memory is host-addressable: `as_ptr()` is valid for reads and writes of
/// `len()` bytes and aligned to at least 256 bytes. When `device_copies()`
/// is `Some` the memory is device-only: `as_ptr()` is null and must not be
/// dereferenced, `device_ptr()` is `Some` and aligned to at least 256 bytes,
/// and the host reaches the bytes only through those copies.
pub unsafe trait RingMemory: Send + Sync {
    /// Host address of the first byte (null for device-only memory).
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the allocation is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Device address of the same bytes, when a GPU can address them.
    fn device_ptr(&self) -> Option<u64> {
        None
    }
    /// Short name for logs ("host", "cuda-mapped", "cuda-device", ...).
    fn kind(&self) -> &'static str;
    /// For device-only memory, the copies through which the host reads and
    /// writes it; `None` for host-addressable memory.
    fn device_copies(&self) -> Option<&dyn DeviceCopies> {
        None
    }
    /// True when the host can address the bytes directly.
    fn is_host_addressable(&self) -> bool {
        self.device_copies().is_none()
    }
    /// How many of the bytes the kernel backs with huge pages, where that is
    /// known (`None` for memory whose pages are not the host's to say).
    fn huge_page_bytes(&self) -> Option<usize> {
        None
    }
}

/// Host access to device-only ring memory: copies that complete before
/// they return. Implementations must never synchronise the whole device
/// (a resident graph that never ends runs on it): they copy on a stream of
/// their own and wait for that stream only.
pub trait DeviceCopies: Send + Sync {
    /// Copies each `(offset, bytes)` into the memory, one after the other in
    /// the given order, and returns once all of them have landed.
    fn write_in_order(&self, writes: &[(usize, &[u8])]) -> Result<(), CopyError>;
    /// Copies `out.len()` bytes starting at `offset` into `out`.
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CopyError>;
}

/// A copy to or from device-only ring memory failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum CopyError {
    /// A copy outside the ring's memory, refused before it ran; a frameloop bug: report it with the
    /// message.
    #[error(
        "a copy of {len} bytes at offset {offset} lies outside the {capacity}-byte ring memory; this is a frameloop bug: report it with this message"
    )]
    OutOfBounds { offset: usize, len: usize, capacity: usize },
    /// A copy to or from GPU memory failed; restart the process (the CUDA context is unusable after
    /// a fault).
    #[error(
        "copying {direction} the GPU ring failed: {why}; the CUDA context is probably unusable after a fault: restart the process"
    )]
    Device { direction: &'static str, why: String },
}

/// Checks that `len` bytes at `offset` lie inside a `capacity`-byte allocation.
pub fn check_copy_bounds(offset: usize, len: usize, capacity: usize) -> Result<(), CopyError> {
    match offset.checked_add(len) {
        Some(end) if end <= capacity => Ok(()),
        _ => Err(CopyError::OutOfBounds { offset, len, capacity }),
    }
}

/// Anonymous private mapping: page-aligned, zero-filled host memory.
pub struct HostMemory {
    pages: RingPages,
}

impl HostMemory {
    /// Maps `len` bytes (at least one page) of zeroed memory in base pages,
    /// faulted in as they are first touched.
    pub fn new(len: usize) -> std::io::Result<Self> {
        Ok(Self { pages: RingPages::lazy(len)? })
    }

    /// Maps `len` bytes for a ring, every page faulted in at once (on a
    /// 16 MiB ring the receiver's first pass would otherwise take ~60 ms of
    /// page faults at the start of traffic, long enough to overflow the
    /// socket buffer), in 2 MiB huge pages when `huge` and the kernel gives
    /// them (see [`RingPages`]).
    pub fn for_ring(len: usize, huge: bool) -> std::io::Result<Self> {
        Ok(Self { pages: RingPages::new(len, huge)? })
    }
}

// SAFETY: an anonymous mapping is page aligned (>= 256), lives until drop and
// never moves; it has no device address.
unsafe impl RingMemory for HostMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.pages.as_ptr()
    }
    fn len(&self) -> usize {
        self.pages.len()
    }
    fn kind(&self) -> &'static str {
        "host"
    }
    fn huge_page_bytes(&self) -> Option<usize> {
        self.pages.huge_page_bytes().ok()
    }
}

/// Device-only memory emulated in host memory for tests: the "device"
/// bytes sit behind a lock, the host reaches them only by the copies, and
/// every copy is logged; `fail` makes the copies fail like a faulted context.
#[cfg(test)]
pub(crate) struct FakeDeviceMemory {
    pub(crate) bytes: std::sync::Mutex<Vec<u8>>,
    pub(crate) dptr: u64,
    /// `(is_write, offset, len)` of every copy, in order.
    pub(crate) log: std::sync::Mutex<Vec<(bool, usize, usize)>>,
    pub(crate) fail: std::sync::atomic::AtomicBool,
}

#[cfg(test)]
impl FakeDeviceMemory {
    pub(crate) fn new(len: usize, dptr: u64) -> Self {
        Self {
            bytes: std::sync::Mutex::new(vec![0; len]),
            dptr,
            log: Default::default(),
            fail: Default::default(),
        }
    }

    fn check(&self, direction: &'static str) -> Result<(), CopyError> {
        if self.fail.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(CopyError::Device { direction, why: "CUDA_ERROR_ILLEGAL_ADDRESS".into() });
        }
        Ok(())
    }

    /// Stores a native-endian word as the device (the GPU handler) would.
    pub(crate) fn store_u64(&self, offset: usize, v: u64) {
        self.bytes.lock().unwrap()[offset..offset + 8].copy_from_slice(&v.to_ne_bytes());
    }
}

#[cfg(test)]
impl DeviceCopies for FakeDeviceMemory {
    fn write_in_order(&self, writes: &[(usize, &[u8])]) -> Result<(), CopyError> {
        self.check("to")?;
        let mut mem = self.bytes.lock().unwrap();
        for (offset, data) in writes {
            check_copy_bounds(*offset, data.len(), mem.len())?;
            mem[*offset..*offset + data.len()].copy_from_slice(data);
            self.log.lock().unwrap().push((true, *offset, data.len()));
        }
        Ok(())
    }
    fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CopyError> {
        self.check("from")?;
        let mem = self.bytes.lock().unwrap();
        check_copy_bounds(offset, out.len(), mem.len())?;
        out.copy_from_slice(&mem[offset..offset + out.len()]);
        self.log.lock().unwrap().push((false, offset, out.len()));
        Ok(())
    }
}

// SAFETY: device-only: `as_ptr` is null and never dereferenced by the ring
// (it uses the copies); the "device" bytes never move while the value lives.
#[cfg(test)]
unsafe impl RingMemory for FakeDeviceMemory {
    fn as_ptr(&self) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn len(&self) -> usize {
        self.bytes.lock().unwrap().len()
    }
    fn device_ptr(&self) -> Option<u64> {
        Some(self.dptr)
    }
    fn kind(&self) -> &'static str {
        "fake-device"
    }
    fn device_copies(&self) -> Option<&dyn DeviceCopies> {
        Some(self)
    }
}

/// Pages of `[ptr, ptr + len)` resident in memory (`mincore`), for the tests
/// that check memory was faulted in ahead of use.
#[cfg(test)]
pub(crate) fn resident_pages(ptr: *const u8, len: usize) -> usize {
    const PAGE: usize = 4096;
    let start = ptr as usize / PAGE * PAGE;
    let pages = (ptr as usize + len).div_ceil(PAGE) - start / PAGE;
    let mut vec = vec![0u8; pages];
    // SAFETY: `start` is page aligned and the span covers memory the caller
    // owns; `vec` holds one byte per page of the span, as mincore writes.
    let rc = unsafe { libc::mincore(start as *mut libc::c_void, pages * PAGE, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 != 0).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn populated_host_memory_is_resident_before_any_write() {
        let len = 8 << 20;
        let lazy = HostMemory::new(len).unwrap();
        let eager = HostMemory::for_ring(len, false).unwrap();
        let huge = HostMemory::for_ring(len, true).unwrap();
        assert_eq!(resident_pages(eager.as_ptr(), eager.len()), len / 4096);
        assert_eq!(resident_pages(huge.as_ptr(), huge.len()), len / 4096);
        assert!(
            resident_pages(lazy.as_ptr(), lazy.len()) < len / 4096,
            "a plain mapping is faulted in lazily"
        );
        // SAFETY: `eager` maps `len` bytes, so both ends are inside it.
        let (first, last) = unsafe { (*eager.as_ptr(), *eager.as_ptr().add(len - 1)) };
        assert_eq!((first, last), (0, 0), "populated memory is still zero-filled");
    }

    #[test]
    fn copy_bounds_accept_the_whole_allocation_and_nothing_past_it() {
        assert_eq!(check_copy_bounds(0, 4096, 4096), Ok(()));
        assert_eq!(check_copy_bounds(4096, 0, 4096), Ok(()));
        assert_eq!(
            check_copy_bounds(4000, 97, 4096),
            Err(CopyError::OutOfBounds { offset: 4000, len: 97, capacity: 4096 })
        );
        assert!(check_copy_bounds(usize::MAX, 2, 4096).is_err(), "overflow is out of bounds");
    }

    #[test]
    fn host_memory_is_host_addressable() {
        let m = HostMemory::new(100).unwrap();
        assert!(m.is_host_addressable() && m.device_copies().is_none());
        assert!(m.len() >= 100 && !m.as_ptr().is_null());
    }
}
