//! cuFFT: whether the library loads ([`cufft_present`]) and a batched
//! real-to-complex plan ([`CufftPlan`]) whose kernels are enqueued on a
//! stream (and so captured into a graph). cuFFT is loaded with dlopen on
//! first use, so a machine without libcufft runs everything but the fft.

use super::error::CudaError;
use cudarc::cufft::{result as cufft, sys as cufft_sys};
use cudarc::driver::CudaStream;

/// True when cuFFT can be loaded. Must be checked before any cuFFT call:
/// cudarc panics when the library is missing.
pub fn cufft_present() -> bool {
    // SAFETY: only tries to dlopen the library; touches no CUDA state.
    unsafe { cufft_sys::is_culib_present() }
}

/// A batched R2C cuFFT plan; destroyed (with its work area) on drop.
pub struct CufftPlan {
    /// Invariant: a live plan made by `cufftPlanMany`.
    handle: cufft_sys::cufftHandle,
}

impl CufftPlan {
    /// `batch` transforms of rows of `n` reals, packed (`idist = n`), into
    /// rows of `n/2 + 1` complex values, packed, in the bound context.
    /// cuFFT must be present ([`cufft_present`]).
    pub fn r2c(n: u32, batch: u32) -> Result<Self, CudaError> {
        let as_int =
            |value: u32, what| i32::try_from(value).map_err(|_| CudaError::OverCufftLimit { what, value });
        let (n, batch) = (as_int(n, "row length")?, as_int(batch, "batch")?);
        let (mut dims, mut inembed, mut onembed) = ([n], [n], [n / 2 + 1]);
        // SAFETY: the three arrays hold `rank` = 1 ints each and outlive the call;
        // the caller checked that the library is present.
        let handle = unsafe {
            cufft::plan_many(
                1,
                dims.as_mut_ptr(),
                inembed.as_mut_ptr(),
                1,
                n,
                onembed.as_mut_ptr(),
                1,
                n / 2 + 1,
                cufft_sys::cufftType::CUFFT_R2C,
                batch,
            )
        }
        .map_err(|source| CudaError::Cufft {
            call: format!("cufftPlanMany(R2C, n = {n}, batch = {batch})"),
            source,
        })?;
        Ok(Self { handle })
    }

    /// Makes the plan's kernels run on `stream`.
    ///
    /// # Safety
    /// `stream` belongs to the context the plan was made in.
    pub unsafe fn bind(&self, stream: &CudaStream) -> Result<(), CudaError> {
        // SAFETY: the plan is live (field invariant) and the stream is live
        // and of the plan's context (the caller's contract).
        unsafe { cufft::set_stream(self.handle, stream.cu_stream() as _) }
            .map_err(|source| CudaError::Cufft { call: "cufftSetStream".into(), source })
    }

    /// Enqueues the transform of `input` into `output` on the bound stream.
    ///
    /// # Safety
    /// `input` must hold the batch's `batch * n` floats and `output` its
    /// `batch * (n/2 + 1)` complex values, both device memory that outlives
    /// every run of the enqueued work.
    pub unsafe fn exec(&self, input: u64, output: u64) -> Result<(), CudaError> {
        // SAFETY: the plan is live; the caller guarantees the two buffers.
        unsafe { cufft::exec_r2c(self.handle, input as *mut f32, output as *mut cufft_sys::cufftComplex) }
            .map_err(|source| CudaError::Cufft { call: "cufftExecR2C".into(), source })
    }
}

impl Drop for CufftPlan {
    fn drop(&mut self) {
        // SAFETY: the plan is live and dropped once; its owner drops it only
        // when nothing runs on it any more.
        if let Err(e) = unsafe { cufft::destroy(self.handle) } {
            tracing::warn!("cufftDestroy failed: {e}");
        }
    }
}
