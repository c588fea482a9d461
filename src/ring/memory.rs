//! Memory that backs a ring: a trait for "bytes the consumer can address",
//! and the plain host implementation (anonymous `memmap2` mapping).

use memmap2::MmapMut;

/// A zero-initialised, fixed allocation that a ring lives in.
///
/// # Safety
/// Implementors guarantee that `as_ptr()` is valid for reads and writes of
/// `len()` bytes for as long as the value lives, is aligned to at least 256
/// bytes, never moves, and that `device_ptr()` (when `Some`) addresses the very
/// same bytes from the GPU.
pub unsafe trait RingMemory: Send + Sync {
    /// Host address of the first byte.
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
    /// Short name for logs ("host", "cuda-mapped", ...).
    fn kind(&self) -> &'static str;
}

/// Anonymous private mapping: page-aligned, zero-filled host memory.
pub struct HostMemory {
    /// Invariant: `ptr == map.as_mut_ptr()` and the mapping is never resized.
    ptr: *mut u8,
    map: MmapMut,
}

// SAFETY: the mapping is plain memory; concurrent access is governed by the
// ring protocols built on top, which only hand out disjoint regions.
unsafe impl Send for HostMemory {}
// SAFETY: as above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// Maps `len` bytes (at least one page) of zeroed memory.
    pub fn new(len: usize) -> std::io::Result<Self> {
        let mut map = MmapMut::map_anon(len.max(1))?;
        let ptr = map.as_mut_ptr();
        debug_assert!((ptr as usize).is_multiple_of(4096));
        Ok(Self { ptr, map })
    }
}

// SAFETY: an anonymous mapping is page aligned (>= 256), lives until drop and
// never moves; it has no device address.
unsafe impl RingMemory for HostMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn kind(&self) -> &'static str {
        "host"
    }
}
