//! Streams: a non-blocking stream this process owns ([`OwnedStream`], for
//! copies that must never wait for the whole device), and the checks and
//! waits on a cudarc stream that its safe API lacks (a non-blocking query).

use super::error::{CudaError, check};
use cudarc::driver::{CudaContext, CudaStream, sys};
use std::sync::Arc;

/// A stream that does not synchronise with the legacy stream
/// (`cuStreamCreate(NON_BLOCKING)`), destroyed on drop.
pub struct OwnedStream {
    ctx: Arc<CudaContext>,
    /// Invariant: a live stream of `ctx`.
    raw: sys::CUstream,
}

// SAFETY: a stream handle may be used from any thread with its context
// bound; the methods bind it first.
unsafe impl Send for OwnedStream {}

impl OwnedStream {
    /// Creates a non-blocking stream in `ctx`.
    pub fn non_blocking(ctx: &Arc<CudaContext>) -> Result<Self, CudaError> {
        ctx.bind_to_thread()?;
        let mut raw = std::ptr::null_mut();
        let flags = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: valid out-pointer; the context is bound.
        check("cuStreamCreate(NON_BLOCKING)", unsafe { sys::cuStreamCreate(&mut raw, flags) })?;
        Ok(Self { ctx: Arc::clone(ctx), raw })
    }

    /// The raw handle, for the stream-ordered calls of [`super::copy`];
    /// valid while `self` lives.
    pub fn raw(&self) -> sys::CUstream {
        self.raw
    }

    /// Waits for the work queued on this stream, and for nothing else.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: the stream is live (invariant).
        check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(self.raw) })
    }
}

impl Drop for OwnedStream {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            tracing::warn!("a CUDA stream leaked: its context could not be bound");
            return;
        }
        // SAFETY: the stream is live and this is its last use; destroying
        // returns at once (queued work finishes first).
        let r = unsafe { sys::cuStreamDestroy_v2(self.raw) };
        if r != sys::CUresult::CUDA_SUCCESS {
            tracing::warn!("destroying a CUDA stream failed: {}", CudaError::driver("cuStreamDestroy", r));
        }
    }
}

/// Waits for the work queued on the legacy default stream of the bound
/// context, which waits for blocking streams only, never for work on
/// non-blocking streams (such as the resident graph's).
pub fn synchronize_legacy_stream() -> Result<(), CudaError> {
    // SAFETY: the legacy stream (the null handle) always exists; without a
    // bound context the driver returns an error status.
    check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(std::ptr::null_mut()) })
}

/// Non-blocking check of a stream: `Ok(true)` when all work finished,
/// `Ok(false)` while running, the error when the work failed.
pub fn stream_done(stream: &CudaStream) -> Result<bool, CudaError> {
    // SAFETY: live stream.
    let r = unsafe { sys::cuStreamQuery(stream.cu_stream()) };
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(true),
        sys::CUresult::CUDA_ERROR_NOT_READY => Ok(false),
        other => Err(CudaError::driver("cuStreamQuery", other)),
    }
}

/// Blocks until `stream` is idle, reporting a failure of its work.
pub fn stream_sync(stream: &CudaStream) -> Result<(), CudaError> {
    // SAFETY: live stream.
    check("cuStreamSynchronize", unsafe { sys::cuStreamSynchronize(stream.cu_stream()) })
}
