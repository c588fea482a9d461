//! Modules and kernels: launch geometry, launches with raw parameter arrays
//! (`cuLaunchKernel`, captured when the stream is capturing), and what the
//! driver says about a loaded function. Modules themselves are loaded with
//! cudarc's `CudaContext::load_module`.

use super::error::{CudaError, check};
use cudarc::driver::{CudaFunction, CudaStream, sys};
use std::ffi::c_void;
use std::ptr;

/// Kernel launch geometry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchDims {
    /// Blocks in x, y, z.
    pub grid: (u32, u32, u32),
    /// Threads per block in x, y, z.
    pub block: (u32, u32, u32),
    /// Dynamic shared memory per block, bytes.
    pub shared_bytes: u32,
}

impl LaunchDims {
    /// One block of one thread.
    pub const SINGLE: LaunchDims = LaunchDims { grid: (1, 1, 1), block: (1, 1, 1), shared_bytes: 0 };

    /// `threads` threads in blocks of `block` (1-D).
    pub fn linear(threads: u32, block: u32) -> Self {
        LaunchDims { grid: (threads.div_ceil(block).max(1), 1, 1), block: (block, 1, 1), shared_bytes: 0 }
    }
}

/// Launches `func` on `stream` (captured when the stream is capturing).
///
/// # Safety
/// `params` must hold one pointer per kernel parameter, each pointing to a
/// value of exactly that parameter's type, alive for the duration of the call.
pub unsafe fn launch_raw(
    stream: &CudaStream,
    func: &CudaFunction,
    dims: LaunchDims,
    params: &mut [*mut c_void],
) -> Result<(), CudaError> {
    // SAFETY: the caller guarantees the parameter array; the function and
    // stream are live handles of the same context.
    let r = unsafe {
        sys::cuLaunchKernel(
            func.cu_function(),
            dims.grid.0,
            dims.grid.1,
            dims.grid.2,
            dims.block.0,
            dims.block.1,
            dims.block.2,
            dims.shared_bytes,
            stream.cu_stream(),
            params.as_mut_ptr(),
            ptr::null_mut(),
        )
    };
    check("cuLaunchKernel", r)
}

/// The name a loaded kernel was compiled with (`cuFuncGetName`), `None`
/// when the driver cannot say.
///
/// # Safety
/// `f` is a function handle of a module that is still loaded (for example
/// the function of a kernel node of a live graph).
pub unsafe fn function_name(f: sys::CUfunction) -> Option<String> {
    let mut name: *const std::ffi::c_char = ptr::null();
    // SAFETY: `f` is a loaded function handle (the caller's contract); the driver
    // stores a pointer to a NUL-terminated string it owns in `name`.
    let status = unsafe { sys::cuFuncGetName(&mut name, f) };
    if status != sys::CUresult::CUDA_SUCCESS || name.is_null() {
        return None;
    }
    // SAFETY: non-null and NUL-terminated per cuFuncGetName's contract; copied at once.
    Some(unsafe { std::ffi::CStr::from_ptr(name) }.to_string_lossy().into_owned())
}
