//! The CUDA backend: probing for a usable GPU, NVRTC compilation of the
//! embedded kernels, a small safe layer over the driver calls cudarc lacks,
//! and the persistent WHILE/IF graph that runs the operator chain per frame.
//!
//! Layering: [`driver`] wraps raw `cudarc::driver::sys` calls in RAII types
//! (the only place with graph/conditional/mapped-memory `unsafe`), with
//! [`device_copy`] (non-synchronising copies) and [`device_memory`]
//! (device-only ring memory) beside it; [`nvrtc`] and [`library`] compile
//! and load kernels; on top, the runtime (an opened GPU), graph building,
//! [`executor`] (run control: launch, tear-down, drop) and [`CudaLoop`]
//! (the loop as the appliance sees it).

pub mod bench;
pub mod chain_builder;
pub mod clock;
pub mod control;
mod cuda_loop;
pub mod device_copy;
pub mod device_memory;
pub mod driver;
pub mod executor;
pub mod fft;
pub mod floors;
pub mod fused;
pub mod fused_tiled;
mod graph;
pub mod kernel_sources;
pub mod library;
pub mod live_chain;
pub mod mapped;
pub mod nvrtc;
pub mod operators;
mod output_publish;
pub mod param_banks;
mod runtime;
pub mod sources;
pub mod streaming;
pub mod user_handler;
pub mod user_kernel;
pub mod user_source;

use cudarc::driver::sys;
use thiserror::Error;

/// What a Rust GPU operator implements and uses (see `Appliance::builder`).
pub use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
pub use chain_builder::{ChainBuilderError, OperatorPosition, samples_after};
pub use control::LoopControl;
pub use cuda_loop::CudaLoop;
pub use executor::{ExecutorCore, ResidentExecutor};
pub use library::KernelLibrary;
pub use mapped::MappedMemory;
pub use runtime::GpuRuntime;

/// Errors of the CUDA backend, each saying how to fix the problem.
#[derive(Debug, Error)]
pub enum GpuError {
    #[error("no usable GPU: {0}")]
    Unavailable(#[from] GpuUnavailable),
    #[error(
        "CUDA call {call} failed: {name} ({text}); check the driver with nvidia-smi and that no other process holds the GPU in exclusive mode"
    )]
    Driver { call: &'static str, name: String, text: String },
    #[error("NVRTC could not compile {file}: {reason}\n{log}")]
    Compile { file: String, reason: String, log: String },
    #[error("kernel {0} is in none of the loaded modules; is its source listed in the embedded sources?")]
    MissingKernel(String),
    #[error("the resident loop faulted in stage {stage} (ring sequence {ring_seq}): {error}")]
    StageFault { stage: String, ring_seq: u64, error: String },
    #[error(
        "the resident loop did not stop within {waited_ms} ms of tear-down (last stage {stage}); the GPU may be wedged: restart the process"
    )]
    TearDownTimeout { waited_ms: u64, stage: String },
    #[error("{what} is not usable by the GPU: {why}")]
    Memory { what: &'static str, why: String },
    #[error("invalid loop setup: {0}")]
    Setup(String),
}

impl GpuError {
    /// Builds a [`GpuError::Driver`] from a failed driver call.
    pub fn driver(call: &'static str, code: sys::CUresult) -> Self {
        let err = cudarc::driver::DriverError(code);
        let name = err
            .error_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("{code:?}"));
        let text = err.error_string().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        GpuError::Driver { call, name, text }
    }
}

/// Converts a raw driver status into a `Result`, naming the call.
pub fn check(call: &'static str, code: sys::CUresult) -> Result<(), GpuError> {
    if code == sys::CUresult::CUDA_SUCCESS { Ok(()) } else { Err(GpuError::driver(call, code)) }
}

impl From<cudarc::driver::DriverError> for GpuError {
    fn from(e: cudarc::driver::DriverError) -> Self {
        GpuError::driver("cudarc", e.0)
    }
}

/// Why the CUDA backend cannot run here, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct GpuUnavailable(pub String);

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuInfo {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Driver API version (e.g. 13000).
    pub driver_version: i32,
    /// NVRTC (major, minor).
    pub nvrtc_version: (i32, i32),
    pub device_count: i32,
}

impl GpuInfo {
    /// The NVRTC architecture option value, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}{}", self.compute_capability.0, self.compute_capability.1)
    }
}

impl std::fmt::Display for GpuInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GPU {} ({}, {}, driver {}, NVRTC {}.{})",
            self.ordinal,
            self.name,
            self.arch(),
            self.driver_version,
            self.nvrtc_version.0,
            self.nvrtc_version.1
        )
    }
}

/// True when the CUDA driver library can be loaded. Must be checked before any
/// other driver call: cudarc panics when the library is missing.
pub fn driver_present() -> bool {
    // SAFETY: only tries to dlopen the library; touches no CUDA state.
    unsafe { sys::is_culib_present() }
}

/// True when the NVRTC library can be loaded (same caveat as [`driver_present`]).
pub fn nvrtc_present() -> bool {
    // SAFETY: as above.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
}

/// Looks for a usable GPU (device `ordinal`) and NVRTC without panicking.
pub fn probe(ordinal: usize) -> Result<GpuInfo, GpuUnavailable> {
    if !driver_present() {
        return Err(GpuUnavailable(
            "the CUDA driver library (libcuda.so) is not installed or not on the loader path".into(),
        ));
    }
    if !nvrtc_present() {
        return Err(GpuUnavailable(
            "NVRTC (libnvrtc.so.13) is not on the loader path; install the CUDA 13 toolkit or the \
             nvidia-cuda-nvrtc wheel and add its lib directory to LD_LIBRARY_PATH"
                .into(),
        ));
    }
    let fail = |what: &str, e: GpuError| GpuUnavailable(format!("{what}: {e}"));
    // SAFETY: the driver library is present (checked above); cuInit has no preconditions.
    check("cuInit", unsafe { sys::cuInit(0) }).map_err(|e| fail("the CUDA driver did not initialise", e))?;
    let mut count = 0;
    // SAFETY: valid out-pointer, driver initialised.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })
        .map_err(|e| fail("cannot count devices", e))?;
    if count == 0 {
        return Err(GpuUnavailable("the CUDA driver sees no GPU".into()));
    }
    if ordinal >= count as usize {
        return Err(GpuUnavailable(format!("GPU {ordinal} requested but only {count} present")));
    }
    let mut driver_version = 0;
    // SAFETY: valid out-pointer.
    check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut driver_version) })
        .map_err(|e| fail("cannot read the driver version", e))?;
    let nvrtc_version = nvrtc::version().map_err(|e| GpuUnavailable(format!("NVRTC is unusable: {e}")))?;
    let mut dev = 0;
    // SAFETY: ordinal < count.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) })
        .map_err(|e| fail("cannot open the device", e))?;
    let attr = |a: sys::CUdevice_attribute| -> Result<i32, GpuUnavailable> {
        let mut v = 0;
        // SAFETY: valid out-pointer and device handle.
        check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) })
            .map_err(|e| fail("cannot read a device attribute", e))?;
        Ok(v)
    };
    use sys::CUdevice_attribute::*;
    let cc = (
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?,
        attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?,
    );
    if cc < (7, 5) {
        return Err(GpuUnavailable(format!(
            "compute capability {}.{} is too old; CUDA 13 and the resident loop need 7.5 or newer",
            cc.0, cc.1
        )));
    }
    if attr(CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY)? == 0 {
        return Err(GpuUnavailable("the GPU cannot map host memory, which the frame ring needs".into()));
    }
    if driver_version < 12040 {
        return Err(GpuUnavailable(format!(
            "driver API {driver_version} lacks conditional WHILE/IF graph nodes; install a CUDA 12.4+ driver (13.0 recommended)"
        )));
    }
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates.
    check("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) })
        .map_err(|e| fail("cannot read the device name", e))?;
    // SAFETY: NUL-terminated by the driver (buffer zero-initialised as a fallback).
    let name = unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned();
    Ok(GpuInfo { ordinal, name, compute_capability: cc, driver_version, nvrtc_version, device_count: count })
}
