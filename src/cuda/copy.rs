//! Copies between host and device memory: synchronous ones (on the legacy
//! stream) and stream-ordered ones (`cuMemcpy*Async`), each checked into a
//! `Result`. Bounds are the caller's: these are the thin layer that the
//! owning types ([`super::memory::DeviceBuffer`], the ring's copy stream)
//! bound.

use super::error::{CudaError, check};
use cudarc::driver::sys;

/// Copies `len` bytes from host `src` to device `dst` and waits for it.
///
/// # Safety
/// `src` is valid for reads of `len` bytes; `dst..dst+len` lies inside a
/// live allocation of the bound context.
pub unsafe fn memcpy_htod(dst: u64, src: *const u8, len: usize) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees both ranges.
    check("cuMemcpyHtoD", unsafe { sys::cuMemcpyHtoD_v2(dst, src.cast(), len) })
}

/// Copies `len` bytes from device `src` to host `dst` and waits for it.
///
/// # Safety
/// `dst` is valid for writes of `len` bytes; `src..src+len` lies inside a
/// live allocation (or IPC mapping) of the bound context.
pub unsafe fn memcpy_dtoh(dst: *mut u8, src: u64, len: usize) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees both ranges.
    check("cuMemcpyDtoH", unsafe { sys::cuMemcpyDtoH_v2(dst.cast(), src, len) })
}

/// Queues a copy of `len` bytes from host `src` to device `dst` on `stream`.
///
/// # Safety
/// `src` is page-locked memory valid for `len` bytes that stays unchanged
/// until the stream has been synchronised; `dst..dst+len` lies inside a
/// live allocation that outlives the copy; `stream` is live.
pub unsafe fn memcpy_htod_async(
    dst: u64,
    src: *const u8,
    len: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees both ranges and the stream.
    check("cuMemcpyHtoDAsync", unsafe { sys::cuMemcpyHtoDAsync_v2(dst, src.cast(), len, stream) })
}

/// Queues a copy of `len` bytes from device `src` to host `dst` on `stream`.
///
/// # Safety
/// `dst` is page-locked memory valid for writes of `len` bytes that
/// nothing reads until the stream has been synchronised;
/// `src..src+len` lies inside a live allocation; `stream` is live.
pub unsafe fn memcpy_dtoh_async(
    dst: *mut u8,
    src: u64,
    len: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees both ranges and the stream.
    check("cuMemcpyDtoHAsync", unsafe { sys::cuMemcpyDtoHAsync_v2(dst.cast(), src, len, stream) })
}

/// Queues a device-to-device copy of `len` bytes on `stream`.
///
/// # Safety
/// Both ranges lie in live device allocations that stay so until the stream
/// is synchronised; `stream` is live.
pub unsafe fn memcpy_dtod_async(
    dst: u64,
    src: u64,
    len: usize,
    stream: sys::CUstream,
) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees both ranges and the stream.
    check("cuMemcpyDtoDAsync", unsafe { sys::cuMemcpyDtoDAsync_v2(dst, src, len, stream) })
}
