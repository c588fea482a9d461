//! The output ring's data region in CUDA device memory: the producer's
//! `cuMemAlloc` allocation exported with `cuIpcGetMemHandle`, and the
//! consumer's mapping of it with `cuIpcOpenMemHandle`.

use super::OutputError;
use super::layout::MemoryKind;
use super::memory::{OutputMemory, SharedRegion};
use crate::gpu::driver::{DeviceBuffer, open_context};
use crate::gpu::{check, probe};
use cudarc::driver::{CudaContext, sys};
use std::sync::Arc;

fn cuda_error(e: impl std::fmt::Display) -> OutputError {
    OutputError::Cuda(e.to_string())
}

/// Byte the device data region is filled with at creation: `0xffffffff` is a
/// NaN, so samples a writer never wrote cannot pass for data.
const POISON: u8 = 0xff;

/// Device memory for an output ring, filled with `POISON`, shareable with
/// other processes.
pub struct DeviceOutputMemory {
    buffer: DeviceBuffer,
    ordinal: i32,
    handle: [u8; 64],
}

impl DeviceOutputMemory {
    /// Allocates `len` bytes on the device of `ctx` (ordinal `ordinal`) and
    /// exports them as a CUDA IPC handle.
    pub fn new(ctx: &Arc<CudaContext>, ordinal: i32, len: usize) -> Result<Self, OutputError> {
        let buffer = DeviceBuffer::new(ctx, len, POISON).map_err(cuda_error)?;
        let mut raw = sys::CUipcMemHandle_st { reserved: [0; 64] };
        // SAFETY: valid out-pointer; `buffer` is a live cuMemAlloc allocation
        // of the current context (`DeviceBuffer::new` bound it).
        check("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut raw, buffer.dptr()) })
            .map_err(cuda_error)?;
        let handle = raw.reserved.map(|c| c as u8);
        Ok(Self { buffer, ordinal, handle })
    }
}

// SAFETY: device memory: `as_ptr` is null; the cuMemAlloc allocation is
// 256-byte aligned, `len()` bytes, and lives (unmoved) until drop.
unsafe impl OutputMemory for DeviceOutputMemory {
    fn as_ptr(&self) -> *mut u8 {
        std::ptr::null_mut()
    }
    fn len(&self) -> usize {
        self.buffer.len()
    }
    fn kind(&self) -> MemoryKind {
        MemoryKind::CudaDevice
    }
    fn device_ptr(&self) -> Option<(u64, i32)> {
        Some((self.buffer.dptr(), self.ordinal))
    }
    fn share(&self) -> SharedRegion<'_> {
        SharedRegion::CudaIpc { handle: self.handle, ordinal: self.ordinal }
    }
}

/// Another process's output ring opened from its CUDA IPC handle; closed on drop.
pub struct IpcMapping {
    ctx: Arc<CudaContext>,
    /// Invariant: a live `cuIpcOpenMemHandle` mapping in `ctx`.
    dptr: u64,
}

impl IpcMapping {
    /// Opens `handle` on device `ordinal` in this process.
    pub fn open(handle: &[u8; 64], ordinal: i32) -> Result<Self, OutputError> {
        let index = usize::try_from(ordinal)
            .map_err(|_| OutputError::Handshake(format!("the hello names CUDA device {ordinal}")))?;
        probe(index).map_err(cuda_error)?;
        let ctx = open_context(index).map_err(cuda_error)?;
        ctx.bind_to_thread().map_err(cuda_error)?;
        let raw = sys::CUipcMemHandle_st { reserved: handle.map(|b| b as std::ffi::c_char) };
        let mut dptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: valid out-pointer; the context is current; the handle bytes
        // came from the appliance's cuIpcGetMemHandle.
        check("cuIpcOpenMemHandle", unsafe { sys::cuIpcOpenMemHandle_v2(&mut dptr, raw, flags) })
            .map_err(cuda_error)?;
        Ok(Self { ctx, dptr })
    }

    /// Copies `out.len()` bytes at `offset` of the mapped region to the host
    /// (a synchronous copy; the caller keeps `offset + out.len()` inside the region).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), OutputError> {
        self.ctx.bind_to_thread().map_err(cuda_error)?;
        // SAFETY: `out` is valid for `out.len()` bytes; the caller keeps the
        // range inside the mapping; the context is current.
        check("cuMemcpyDtoH", unsafe {
            sys::cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), self.dptr + offset as u64, out.len())
        })
        .map_err(cuda_error)
    }

    /// Device address of the mapped data region.
    pub fn dptr(&self) -> u64 {
        self.dptr
    }
}

impl Drop for IpcMapping {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_ok() {
            // SAFETY: `dptr` is a live mapping of this context, closed once.
            let closed = unsafe { sys::cuIpcCloseMemHandle(self.dptr) };
            if closed != sys::CUresult::CUDA_SUCCESS {
                tracing::warn!("cuIpcCloseMemHandle failed ({closed:?})");
            }
        }
    }
}
