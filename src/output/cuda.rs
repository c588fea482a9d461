//! The output ring's data region in CUDA device memory: the producer's
//! `cuMemAlloc` allocation exported as a CUDA IPC handle, and the
//! consumer's mapping of it (both from the CUDA layer, [`crate::cuda`]).

use super::OutputError;
use super::layout::MemoryKind;
use super::memory::{OutputMemory, SharedRegion};
use crate::cuda::{CudaError, DeviceBuffer, ipc, open_context, probe};
use cudarc::driver::CudaContext;
use std::sync::Arc;

fn cuda_error(e: impl Into<CudaError>) -> OutputError {
    OutputError::Cuda(e.into())
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
        // `DeviceBuffer::new` left the context bound.
        let handle = ipc::export_handle(&buffer).map_err(cuda_error)?;
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
    fn copy_stream(&self) -> Option<Result<crate::cuda::CopyStream, OutputError>> {
        Some(
            crate::cuda::CopyStream::new(self.buffer.context(), self.buffer.dptr(), self.buffer.len())
                .map_err(cuda_error),
        )
    }
}

/// Another process's output ring opened from its CUDA IPC handle; closed on drop.
pub struct IpcMapping {
    mapping: ipc::IpcMapping,
}

impl IpcMapping {
    /// Opens `handle` on device `ordinal` in this process.
    pub fn open(handle: &[u8; 64], ordinal: i32) -> Result<Self, OutputError> {
        let index = usize::try_from(ordinal)
            .map_err(|_| OutputError::Handshake(format!("the hello names CUDA device {ordinal}")))?;
        probe(index).map_err(cuda_error)?;
        let ctx = open_context(index).map_err(cuda_error)?;
        let mapping = ipc::IpcMapping::open(&ctx, handle).map_err(cuda_error)?;
        Ok(Self { mapping })
    }

    /// Copies `out.len()` bytes at `offset` of the mapped region to the host
    /// (a synchronous copy; the caller keeps `offset + out.len()` inside the region).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), OutputError> {
        self.mapping.read(offset, out).map_err(cuda_error)
    }

    /// Device address of the mapped data region.
    pub fn dptr(&self) -> u64 {
        self.mapping.dptr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_failed_open_keeps_the_cuda_error_as_its_source() {
        let err = IpcMapping::open(&[0; 64], -1).err().expect("a negative ordinal is refused");
        assert!(matches!(err, OutputError::Handshake(_)), "{err}");
        let err = IpcMapping::open(&[0; 64], 0).err().expect("an all-zero handle maps nothing");
        assert!(err.source().is_some_and(|s| s.is::<CudaError>()), "{err}");
        let OutputError::Cuda(cuda) = &err else { panic!("not a CUDA error: {err}") };
        if probe(0).is_ok() {
            assert!(matches!(cuda, CudaError::Driver { call: "cuIpcOpenMemHandle", .. }), "{cuda}");
            assert!(cuda.driver_code().is_some(), "{cuda}");
        } else {
            assert!(matches!(cuda, CudaError::Unavailable(_)), "{cuda}");
            assert!(err.to_string().contains("no usable GPU"), "{err}");
        }
    }
}
