//! CUDA IPC: a device allocation exported as a 64-byte handle
//! (`cuIpcGetMemHandle`) that another process opens as a mapping of the
//! same memory ([`IpcMapping`], `cuIpcOpenMemHandle`).

use super::copy;
use super::error::{CudaError, check};
use super::memory::DeviceBuffer;
use cudarc::driver::{CudaContext, sys};
use std::sync::Arc;

/// The IPC handle of the allocation `buffer` (its context must be bound).
pub fn export_handle(buffer: &DeviceBuffer) -> Result<[u8; 64], CudaError> {
    let mut raw = sys::CUipcMemHandle_st { reserved: [0; 64] };
    // SAFETY: valid out-pointer; `buffer` is a live cuMemAlloc allocation.
    check("cuIpcGetMemHandle", unsafe { sys::cuIpcGetMemHandle(&mut raw, buffer.dptr()) })?;
    Ok(raw.reserved.map(|c| c as u8))
}

/// Another process's allocation opened from its IPC handle; closed on drop.
pub struct IpcMapping {
    ctx: Arc<CudaContext>,
    /// Invariant: a live `cuIpcOpenMemHandle` mapping in `ctx`.
    dptr: u64,
}

impl IpcMapping {
    /// Opens `handle` in `ctx` (peer access enabled lazily).
    pub fn open(ctx: &Arc<CudaContext>, handle: &[u8; 64]) -> Result<Self, CudaError> {
        ctx.bind_to_thread()?;
        let raw = sys::CUipcMemHandle_st { reserved: handle.map(|b| b as std::ffi::c_char) };
        let mut dptr = 0;
        let flags = sys::CUipcMem_flags::CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS as u32;
        // SAFETY: valid out-pointer; the context is current; the driver
        // validates the handle's bytes.
        check("cuIpcOpenMemHandle", unsafe { sys::cuIpcOpenMemHandle_v2(&mut dptr, raw, flags) })?;
        Ok(Self { ctx: Arc::clone(ctx), dptr })
    }

    /// Copies `out.len()` bytes at `offset` of the mapped region to the host
    /// (a synchronous copy; the caller keeps `offset + out.len()` inside the region).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        self.ctx.bind_to_thread()?;
        // SAFETY: `out` is valid for `out.len()` bytes; the caller keeps the
        // range inside the mapping; the context is current.
        unsafe { copy::memcpy_dtoh(out.as_mut_ptr(), self.dptr + offset as u64, out.len()) }
    }

    /// Device address of the mapped region.
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
