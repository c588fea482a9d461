//! Devices and contexts: whether the CUDA libraries load at all, what a GPU
//! is ([`probe`]: is it usable for the resident loop), its attributes, and
//! the one primary context per device the whole process shares
//! ([`open_context`]).

use super::error::{CudaError, check};
use cudarc::driver::{CudaContext, sys};
use std::sync::Arc;
use thiserror::Error;

/// Why the CUDA backend cannot run here, in one line.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{0}")]
pub struct GpuUnavailable(pub String);

/// What [`probe`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GpuInfo {
    /// The device's index, as `CUDA_VISIBLE_DEVICES` numbers them.
    pub ordinal: usize,
    /// The device's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Compute capability (major, minor).
    pub compute_capability: (i32, i32),
    /// Driver API version (e.g. 13000).
    pub driver_version: i32,
    /// NVRTC (major, minor).
    pub nvrtc_version: (i32, i32),
    /// How many devices the driver sees.
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

/// Initialises the driver (`cuInit`). The driver library must be present
/// ([`driver_present`]).
pub fn init() -> Result<(), CudaError> {
    // SAFETY: callers checked that the driver library loads; cuInit has no
    // other precondition.
    check("cuInit", unsafe { sys::cuInit(0) })
}

/// How many devices the initialised driver sees.
pub fn device_count() -> Result<i32, CudaError> {
    let mut count = 0;
    // SAFETY: valid out-pointer, driver initialised.
    check("cuDeviceGetCount", unsafe { sys::cuDeviceGetCount(&mut count) })?;
    Ok(count)
}

/// The driver API version, e.g. 13000.
pub fn driver_version() -> Result<i32, CudaError> {
    let mut version = 0;
    // SAFETY: valid out-pointer.
    check("cuDriverGetVersion", unsafe { sys::cuDriverGetVersion(&mut version) })?;
    Ok(version)
}

/// The device handle of `ordinal` (driver initialised).
pub fn device(ordinal: usize) -> Result<sys::CUdevice, CudaError> {
    let mut dev = 0;
    // SAFETY: valid out-pointer; an ordinal past the count is an error status.
    check("cuDeviceGet", unsafe { sys::cuDeviceGet(&mut dev, ordinal as i32) })?;
    Ok(dev)
}

/// One attribute of device `dev`.
pub fn device_attribute(dev: sys::CUdevice, attribute: sys::CUdevice_attribute) -> Result<i32, CudaError> {
    let mut v = 0;
    // SAFETY: valid out-pointer and device handle.
    check("cuDeviceGetAttribute", unsafe { sys::cuDeviceGetAttribute(&mut v, attribute, dev) })?;
    Ok(v)
}

/// The name of device `dev`.
pub fn device_name(dev: sys::CUdevice) -> Result<String, CudaError> {
    let mut name = [0 as std::ffi::c_char; 256];
    // SAFETY: the buffer holds 256 bytes and the driver NUL-terminates.
    check("cuDeviceGetName", unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as i32, dev) })?;
    // SAFETY: NUL-terminated by the driver (buffer zero-initialised as a fallback).
    Ok(unsafe { std::ffi::CStr::from_ptr(name.as_ptr()) }.to_string_lossy().into_owned())
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
    let fail = |what: &str, e: CudaError| GpuUnavailable(format!("{what}: {e}"));
    init().map_err(|e| fail("the CUDA driver did not initialise", e))?;
    let count = device_count().map_err(|e| fail("cannot count devices", e))?;
    if count == 0 {
        return Err(GpuUnavailable("the CUDA driver sees no GPU".into()));
    }
    if ordinal >= count as usize {
        return Err(GpuUnavailable(format!("GPU {ordinal} requested but only {count} present")));
    }
    let driver_version = driver_version().map_err(|e| fail("cannot read the driver version", e))?;
    let nvrtc_version =
        super::nvrtc::version().map_err(|e| GpuUnavailable(format!("NVRTC is unusable: {e}")))?;
    let dev = device(ordinal).map_err(|e| fail("cannot open the device", e))?;
    let attr = |a| device_attribute(dev, a).map_err(|e| fail("cannot read a device attribute", e));
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
    let name = device_name(dev).map_err(|e| fail("cannot read the device name", e))?;
    Ok(GpuInfo { ordinal, name, compute_capability: cc, driver_version, nvrtc_version, device_count: count })
}

/// Opens device `ordinal`'s primary context with spin-waiting synchronisation
/// (the lowest-latency choice for the launch-per-frame baselines) and returns it
/// bound to the calling thread.
pub fn open_context(ordinal: usize) -> Result<Arc<CudaContext>, CudaError> {
    // One context handle per device for the whole process: several resident
    // loops on one GPU share it. A second handle would synchronize the whole
    // context when it makes its first stream (cudarc does, to set up its
    // event tracking), and so wait forever behind a loop already running.
    static OPEN: std::sync::Mutex<Vec<(usize, std::sync::Weak<CudaContext>)>> =
        std::sync::Mutex::new(Vec::new());
    let mut open = OPEN.lock().unwrap_or_else(|e| e.into_inner());
    open.retain(|(_, ctx)| ctx.strong_count() > 0);
    if let Some(ctx) = open.iter().find(|(o, _)| *o == ordinal).and_then(|(_, ctx)| ctx.upgrade()) {
        ctx.bind_to_thread()?;
        return Ok(ctx);
    }
    let ctx = new_context(ordinal)?;
    open.push((ordinal, Arc::downgrade(&ctx)));
    Ok(ctx)
}

/// The device's primary context, set to spin while it waits, as a new handle.
fn new_context(ordinal: usize) -> Result<Arc<CudaContext>, CudaError> {
    // Callers reach this only after `probe` confirmed the driver library.
    init()?;
    let dev = device(ordinal)?;
    let flags = sys::CUctx_flags::CU_CTX_SCHED_SPIN as u32;
    // SAFETY: valid device; fails harmlessly when the primary context is active already.
    let set = unsafe { sys::cuDevicePrimaryCtxSetFlags_v2(dev, flags) };
    if set != sys::CUresult::CUDA_SUCCESS {
        tracing::debug!("primary context flags left as they were ({set:?})");
    }
    Ok(CudaContext::new(ordinal)?)
}
