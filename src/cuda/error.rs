//! The error of the CUDA layer: which call failed, with the status the
//! driver, NVRTC or cuFFT returned kept as the source, so that callers can
//! match on the code (`CudaError::Driver { source: DriverError(code), .. }`)
//! instead of parsing a message.

use cudarc::cufft::result::CufftError;
use cudarc::driver::{DriverError, sys};
use cudarc::nvrtc::result::NvrtcError;
use thiserror::Error;

use super::device::GpuUnavailable;

/// A failed call of the CUDA layer, each variant saying how to fix it.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum CudaError {
    /// The machine has no usable GPU or CUDA library: install the driver or
    /// toolkit named in the message, or run the host backend.
    #[error("no usable GPU: {0}")]
    Unavailable(#[from] GpuUnavailable),
    /// A CUDA driver call returned an error status (`source.0` is the
    /// `CUresult`). Check the driver with `nvidia-smi`, that no other
    /// process holds the GPU in exclusive mode, and the device's memory.
    #[error(
        "CUDA call {call} failed: {name} ({text}); check the driver with nvidia-smi and that no other process holds the GPU in exclusive mode"
    )]
    Driver {
        /// The driver function that failed, e.g. `cuMemAlloc`.
        call: &'static str,
        /// The status's name (`cuGetErrorName`), e.g. `CUDA_ERROR_OUT_OF_MEMORY`.
        name: String,
        /// The driver's description of the status (`cuGetErrorString`).
        text: String,
        /// The status itself.
        #[source]
        source: DriverError,
    },
    /// An NVRTC call returned an error status (`source.0` is the
    /// `nvrtcResult`). A compilation error comes with the program log
    /// (see `gpu::GpuError::Compile`); any other status means an NVRTC
    /// library that does not match the driver: install NVRTC 13.
    #[error("{call}: {text}")]
    Nvrtc {
        /// The NVRTC function that failed, e.g. `nvrtcCompileProgram`.
        call: &'static str,
        /// NVRTC's description of the status (`nvrtcGetErrorString`).
        text: String,
        /// The status itself.
        #[source]
        source: NvrtcError,
    },
    /// A cuFFT call returned an error status (`source.0` is the
    /// `cufftResult`). Usually the GPU is out of memory for the plan's work
    /// area: shorten the transform's batch (smaller frames) or free memory.
    #[error("{call} failed: {source}")]
    Cufft {
        /// The cuFFT call with its arguments, e.g. `cufftPlanMany(R2C, n = 1024, batch = 4)`.
        call: String,
        /// The status itself.
        #[source]
        source: CufftError,
    },
    /// A size does not fit the 32-bit int a cuFFT call takes: make the
    /// transform or its batch smaller.
    #[error("{what} {value} is over cuFFT's limit")]
    OverCufftLimit {
        /// What the value is (`row length`, `batch`).
        what: &'static str,
        /// The value asked for.
        value: u32,
    },
    /// A copy of `len` bytes at `offset` would leave a `size`-byte device
    /// buffer: a caller's bounds are wrong (a bug in frameloop).
    #[error("{direction} of {len} bytes at {offset} past a {size}-byte buffer")]
    OutOfBounds {
        /// `write` or `read`.
        direction: &'static str,
        /// Bytes to copy.
        len: usize,
        /// Offset of the copy in the buffer.
        offset: usize,
        /// The buffer's length.
        size: usize,
    },
    /// A call reported success but returned no usable result (a driver bug
    /// or a driver too old for the call): update the driver.
    #[error("{call} returned {what}; update the CUDA driver")]
    NoResult {
        /// The driver function.
        call: &'static str,
        /// What it returned instead of a result.
        what: String,
    },
}

impl CudaError {
    /// The error of driver call `call` that returned `code`, with the
    /// status's name and description (when the driver library can say).
    pub fn driver(call: &'static str, code: sys::CUresult) -> Self {
        let source = DriverError(code);
        let (name, text) = if super::device::driver_present() {
            let name = source
                .error_name()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_else(|_| format!("{code:?}"));
            (name, source.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default())
        } else {
            (format!("{code:?}"), String::new())
        };
        CudaError::Driver { call, name, text, source }
    }

    /// The error of NVRTC call `call` that returned `code`.
    pub fn nvrtc(call: &'static str, code: cudarc::nvrtc::sys::nvrtcResult) -> Self {
        let text = if super::device::nvrtc_present() {
            // SAFETY: NVRTC is loaded (checked just above); nvrtcGetErrorString
            // returns a static NUL-terminated string for every status.
            unsafe { std::ffi::CStr::from_ptr(cudarc::nvrtc::sys::nvrtcGetErrorString(code)) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("{code:?}")
        };
        CudaError::Nvrtc { call, text, source: NvrtcError(code) }
    }

    /// The driver status, when a driver call failed.
    pub fn driver_code(&self) -> Option<sys::CUresult> {
        match self {
            CudaError::Driver { source, .. } => Some(source.0),
            _ => None,
        }
    }
}

impl From<DriverError> for CudaError {
    /// A failure inside a cudarc safe-API call (context, stream, module).
    fn from(e: DriverError) -> Self {
        CudaError::driver("cudarc", e.0)
    }
}

/// Converts a raw driver status into a `Result`, naming the call.
pub fn check(call: &'static str, code: sys::CUresult) -> Result<(), CudaError> {
    if code == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(CudaError::driver(call, code)) }
}

/// Converts a raw NVRTC status into a `Result`, naming the call.
pub(super) fn check_nvrtc(
    call: &'static str,
    code: cudarc::nvrtc::sys::nvrtcResult,
) -> Result<(), CudaError> {
    if code == cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::nvrtc(call, code))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    #[test]
    fn a_driver_error_keeps_its_code_as_the_source() {
        let err = CudaError::driver("cuMemAlloc", sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert!(matches!(
            err,
            CudaError::Driver {
                call: "cuMemAlloc",
                source: DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY),
                ..
            }
        ));
        assert_eq!(err.driver_code(), Some(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY));
        let source =
            err.source().and_then(|s| s.downcast_ref::<DriverError>()).expect("a DriverError source");
        assert_eq!(source.0, sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        let text = err.to_string();
        assert!(text.starts_with("CUDA call cuMemAlloc failed: "), "{text}");
        assert!(text.contains("OUT_OF_MEMORY"), "{text}");
        assert!(text.contains("check the driver with nvidia-smi"), "{text}");
    }

    #[test]
    fn nvrtc_and_cufft_errors_keep_their_status() {
        let err =
            CudaError::nvrtc("nvrtcCompileProgram", cudarc::nvrtc::sys::nvrtcResult::NVRTC_ERROR_COMPILATION);
        assert!(matches!(
            &err,
            CudaError::Nvrtc {
                source: NvrtcError(cudarc::nvrtc::sys::nvrtcResult::NVRTC_ERROR_COMPILATION),
                ..
            }
        ));
        assert!(err.to_string().starts_with("nvrtcCompileProgram: "), "{err}");
        assert!(err.source().is_some_and(|s| s.is::<NvrtcError>()));
        let err = CudaError::Cufft {
            call: "cufftExecR2C".into(),
            source: CufftError(cudarc::cufft::sys::cufftResult::CUFFT_EXEC_FAILED),
        };
        assert!(err.to_string().starts_with("cufftExecR2C failed: "), "{err}");
        assert!(err.source().is_some_and(|s| s.is::<CufftError>()));
        assert_eq!(err.driver_code(), None);
    }

    #[test]
    fn success_is_no_error() {
        assert!(check("cuInit", sys::CUresult::CUDA_SUCCESS).is_ok());
        assert!(check_nvrtc("nvrtcVersion", cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS).is_ok());
        let err = check("cuInit", sys::CUresult::CUDA_ERROR_NO_DEVICE).unwrap_err();
        assert_eq!(err.driver_code(), Some(sys::CUresult::CUDA_ERROR_NO_DEVICE));
    }
}
