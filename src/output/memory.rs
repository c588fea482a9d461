//! Memory the output ring lives in: a trait for "a region a consumer in
//! another process can be handed", and its host implementation, a memfd
//! mapped shared. The CUDA backend implements the same trait for device
//! memory exported as a CUDA IPC handle.

use super::OutputError;
use super::layout::MemoryKind;
use memmap2::{MmapMut, MmapOptions};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// How a region is handed to another process.
pub enum SharedRegion<'a> {
    /// Host memory: this file descriptor (a memfd) is sent by SCM_RIGHTS.
    HostFd(BorrowedFd<'a>),
    /// Device memory: a `cuIpcGetMemHandle` handle of the allocation on
    /// device `ordinal`, sent as bytes in the hello.
    CudaIpc { handle: [u8; 64], ordinal: i32 },
}

/// An initialised, fixed region the output ring's slots live in (host
/// memory zeroed, device memory poisoned; no slot is read before its
/// sequence word says it was written).
///
/// # Safety
/// Implementors guarantee that the region is `len()` bytes and never moves
/// while the value lives. For [`MemoryKind::HostMemfd`], `as_ptr()` is valid
/// for reads and writes of `len()` bytes and 256-byte aligned. For
/// [`MemoryKind::CudaDevice`], `as_ptr()` is null and never dereferenced,
/// and `device_ptr()` is `Some`, 256-byte aligned, addressing `len()` bytes.
pub unsafe trait OutputMemory: Send + Sync {
    /// Host address of the first byte (null for device memory).
    fn as_ptr(&self) -> *mut u8;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True when the region is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Where the bytes live.
    fn kind(&self) -> MemoryKind;
    /// `(device address, device ordinal)` when a GPU addresses the bytes.
    fn device_ptr(&self) -> Option<(u64, i32)> {
        None
    }
    /// What a consumer is handed to map the same bytes.
    fn share(&self) -> SharedRegion<'_>;
    /// For device memory: a stream that copies from it to the host without
    /// waiting for the device's other work (a previewer's reads).
    fn copy_stream(&self) -> Option<Result<crate::cuda::CopyStream, OutputError>> {
        None
    }
}

/// A memfd of a fixed length mapped shared, readable and writable.
pub struct SharedHostMemory {
    /// Invariant: `map` maps all `map.len()` bytes of `file` shared, and is
    /// never resized; `ptr == map.as_mut_ptr()`.
    ptr: *mut u8,
    map: MmapMut,
    file: File,
}

// SAFETY: the mapping is plain memory; concurrent access is governed by the
// output ring's sequence protocol.
unsafe impl Send for SharedHostMemory {}
// SAFETY: as above.
unsafe impl Sync for SharedHostMemory {}

impl SharedHostMemory {
    /// Creates a zero-filled memfd named `name` (shown in /proc/PID/fd) of
    /// `len` bytes and maps it.
    pub fn create(name: &str, len: usize) -> Result<Self, OutputError> {
        let fd = nix::sys::memfd::memfd_create(name, nix::sys::memfd::MFdFlags::MFD_CLOEXEC)
            .map_err(|e| OutputError::Memory { what: "create a memfd", source: e.into() })?;
        let file = File::from(fd);
        file.set_len(len as u64).map_err(|source| OutputError::Memory { what: "size the memfd", source })?;
        Self::map(file, len)
    }

    /// Maps `len` bytes of a memfd received from the appliance; refuses one
    /// shorter than `len` (mapping past its end would fault on access).
    pub fn open(fd: OwnedFd, len: usize) -> Result<Self, OutputError> {
        let file = File::from(fd);
        let actual =
            file.metadata().map_err(|source| OutputError::Memory { what: "stat the memfd", source })?.len();
        if actual < len as u64 {
            return Err(OutputError::Handshake(format!(
                "the appliance sent a {actual}-byte region where its hello promised {len} bytes"
            )));
        }
        Self::map(file, len)
    }

    fn map(file: File, len: usize) -> Result<Self, OutputError> {
        // SAFETY: the memfd is at least `len` bytes (sized or checked by the
        // callers) and is never truncated by frameloop; its bytes change
        // under the mapping only through the ring protocol's atomic words and
        // the slot contents those words guard.
        let mut map = unsafe { MmapOptions::new().len(len.max(1)).map_mut(&file) }
            .map_err(|source| OutputError::Memory { what: "map the memfd", source })?;
        let ptr = map.as_mut_ptr();
        debug_assert!((ptr as usize).is_multiple_of(4096));
        Ok(Self { ptr, map, file })
    }
}

// SAFETY: a shared mapping is page aligned (>= 256), lives until drop and
// never moves; it is host memory.
unsafe impl OutputMemory for SharedHostMemory {
    fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }
    fn len(&self) -> usize {
        self.map.len()
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::HostMemfd
    }
    fn share(&self) -> SharedRegion<'_> {
        SharedRegion::HostFd(self.file.as_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memfd_maps_the_same_bytes_twice() {
        let a = SharedHostMemory::create("frameloop-test", 4096).unwrap();
        let SharedRegion::HostFd(fd) = a.share() else { panic!("host memory shares an fd") };
        let b = SharedHostMemory::open(fd.try_clone_to_owned().unwrap(), 4096).unwrap();
        // SAFETY: both mappings are 4096 bytes long; no other thread uses them.
        unsafe {
            a.as_ptr().add(100).write(42);
            assert_eq!(b.as_ptr().add(100).read(), 42);
        }
    }

    #[test]
    fn a_region_shorter_than_promised_is_refused() {
        let a = SharedHostMemory::create("frameloop-test", 4096).unwrap();
        let SharedRegion::HostFd(fd) = a.share() else { panic!("host memory shares an fd") };
        let err = SharedHostMemory::open(fd.try_clone_to_owned().unwrap(), 8192).err().unwrap();
        assert!(err.to_string().contains("4096-byte region"), "{err}");
    }
}
