//! dma-buf export of device memory (`cuMemGetHandleForAddressRange`), the
//! handle a NIC registers with `ibv_reg_dmabuf_mr` for GPUDirect RDMA.

use super::error::{CudaError, check};
use cudarc::driver::sys;
use std::os::fd::{FromRawFd, OwnedFd};

/// Exports `len` bytes at `dptr` as a dma-buf file descriptor. The context
/// must be bound; `dptr..dptr+len` must be one live allocation whose length
/// is a multiple of the host page size (the driver refuses anything else).
pub fn export(dptr: u64, len: usize) -> Result<OwnedFd, CudaError> {
    let mut fd: i32 = -1;
    // SAFETY: a valid out-pointer for the int that DMA_BUF_FD handles are;
    // the driver checks the range against its allocations.
    check("cuMemGetHandleForAddressRange", unsafe {
        sys::cuMemGetHandleForAddressRange(
            (&mut fd as *mut i32).cast(),
            dptr,
            len,
            sys::CUmemRangeHandleType::CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD,
            0,
        )
    })?;
    if fd < 0 {
        return Err(CudaError::NoResult { call: "cuMemGetHandleForAddressRange", what: format!("fd {fd}") });
    }
    // SAFETY: the driver handed us a new descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
