//! Host <-> GPU copies that never synchronise the device: a dedicated
//! non-blocking stream, page-locked staging memory, `cuMemcpy*Async` on that
//! stream and `cuStreamSynchronize` of that stream only. A persistent graph
//! that never ends runs on the GPU while the host reads the GPU ring's
//! sequence words, so nothing here may wait for the whole device (no
//! `cuCtxSynchronize`, no synchronous `cuMemcpy` on the legacy stream).
//!
//! Layering: the stream and copy calls ([`super::stream`], [`super::copy`])
//! below; [`CopyStream`] is the safe owner that bounds every copy to one
//! device allocation (the GPU rings and the output ring in device memory
//! use it).

use super::copy::{memcpy_dtoh_async, memcpy_htod_async};
use super::error::CudaError;
use super::memory::PinnedHost;
use super::stream::{OwnedStream, synchronize_legacy_stream};
use crate::ring::memory::{CopyError, check_copy_bounds};
use cudarc::driver::CudaContext;
use std::sync::Arc;

/// Page-locked staging bytes per stream (larger copies go in pieces).
pub const STAGING_BYTES: usize = 1 << 20;

/// Ordered copies into and out of one device allocation, on a stream of
/// their own. Freeing it frees page-locked memory, which synchronises the
/// device: drop it only when no resident graph runs.
pub struct CopyStream {
    ctx: Arc<CudaContext>,
    /// Invariant: a non-blocking stream of `ctx`; every copy queued on it
    /// has finished whenever a method of `&mut self` returns. Declared
    /// before `staging`: destroyed first.
    stream: OwnedStream,
    /// Page-locked staging. Invariant: at least [`STAGING_BYTES`] long and
    /// read or written by no queued copy whenever a method returns.
    staging: PinnedHost,
    /// The device allocation the copies may touch: `len` bytes at `dptr`.
    dptr: u64,
    len: usize,
}

impl CopyStream {
    /// A stream for copies into the `len` bytes at `dptr`, a live
    /// allocation of `ctx` that must outlive the returned value.
    ///
    /// Work already queued on the legacy stream (the allocation's zeroing
    /// `cuMemsetD8`) is not ordered with a non-blocking stream, so this waits
    /// for it once, before any copy could land under it.
    pub fn new(ctx: &Arc<CudaContext>, dptr: u64, len: usize) -> Result<Self, CudaError> {
        let staging = PinnedHost::alloc(ctx, STAGING_BYTES)?;
        ctx.bind_to_thread()?;
        synchronize_legacy_stream()?;
        let stream = OwnedStream::non_blocking(ctx)?;
        debug_assert!(staging.len() >= STAGING_BYTES);
        Ok(Self { ctx: Arc::clone(ctx), stream, staging, dptr, len })
    }

    fn device_error(direction: &'static str, e: CudaError) -> CopyError {
        CopyError::Device { direction, why: e.to_string() }
    }

    fn synchronize(&mut self) -> Result<(), CudaError> {
        self.stream.synchronize()
    }

    /// Copies each `(offset, bytes)` into the allocation in order and
    /// returns once the stream has finished all of them.
    pub fn write_in_order(&mut self, writes: &[(usize, &[u8])]) -> Result<(), CopyError> {
        for (offset, bytes) in writes {
            check_copy_bounds(*offset, bytes.len(), self.len)?;
        }
        self.ctx.bind_to_thread().map_err(|e| Self::device_error("to", e.into()))?;
        let queued = self.queue_writes(writes);
        // Synchronise even after a failed queueing: queued copies may still
        // read the staging bytes.
        let synced = self.synchronize();
        queued.and(synced).map_err(|e| Self::device_error("to", e))
    }

    fn queue_writes(&mut self, writes: &[(usize, &[u8])]) -> Result<(), CudaError> {
        let staging = self.staging.host_ptr();
        let capacity = STAGING_BYTES;
        let mut used = 0;
        for &(offset, bytes) in writes {
            let mut done = 0;
            while done < bytes.len() {
                if used == capacity {
                    self.synchronize()?;
                    used = 0;
                }
                let n = (bytes.len() - done).min(capacity - used);
                // SAFETY: `used + n <= capacity`, inside the staging; copies
                // queued since the last synchronisation read only `[0, used)`.
                unsafe { std::ptr::copy_nonoverlapping(bytes[done..].as_ptr(), staging.add(used), n) };
                // SAFETY: the staging range is page-locked and stays untouched
                // until the stream is synchronised (above, or by the caller);
                // `offset + done + n <= self.len` (bounds checked by the caller).
                unsafe {
                    memcpy_htod_async(
                        self.dptr + (offset + done) as u64,
                        staging.add(used),
                        n,
                        self.stream.raw(),
                    )
                }?;
                used += n;
                done += n;
            }
        }
        Ok(())
    }

    /// Copies `out.len()` bytes from `offset` of the allocation into `out`.
    pub fn read(&mut self, offset: usize, out: &mut [u8]) -> Result<(), CopyError> {
        check_copy_bounds(offset, out.len(), self.len)?;
        self.ctx.bind_to_thread().map_err(|e| Self::device_error("from", e.into()))?;
        let staging = self.staging.host_ptr();
        for (i, chunk) in out.chunks_mut(STAGING_BYTES).enumerate() {
            let at = offset + i * STAGING_BYTES;
            // SAFETY: `chunk.len() <= STAGING_BYTES`, the staging's size; no
            // other copy uses the staging (invariant); `at + chunk.len()` lies
            // inside the allocation (bounds checked above).
            let queued =
                unsafe { memcpy_dtoh_async(staging, self.dptr + at as u64, chunk.len(), self.stream.raw()) };
            let synced = self.synchronize();
            queued.and(synced).map_err(|e| Self::device_error("from", e))?;
            // SAFETY: the copy into the staging finished (stream synchronised).
            unsafe { std::ptr::copy_nonoverlapping(staging, chunk.as_mut_ptr(), chunk.len()) };
        }
        Ok(())
    }
}
