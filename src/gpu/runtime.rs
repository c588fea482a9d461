//! The GPU runtime: one opened device (probed, its context opened, the
//! kernels compiled or loaded) with its clock calibration.

use super::clock::ClockCalibration;
use super::driver;
use super::library::KernelLibrary;
use super::mapped::MappedMemory;
use super::nvrtc::CacheDir;
use super::{GpuError, GpuInfo};
use cudarc::driver::CudaContext;
use std::sync::{Arc, Mutex};

/// An opened GPU: context, compiled kernels and clock calibration.
pub struct GpuRuntime {
    pub info: GpuInfo,
    pub ctx: Arc<CudaContext>,
    pub library: KernelLibrary,
    clock: Mutex<ClockCalibration>,
    probe: Mutex<super::clock::ClockProbe>,
}

impl GpuRuntime {
    /// Probes device `ordinal`, opens it, compiles (or loads cached) kernels and
    /// calibrates the GPU clock.
    pub fn open(ordinal: usize, cache: CacheDir) -> Result<Arc<Self>, GpuError> {
        let info = super::probe(ordinal)?;
        let ctx = driver::open_context(ordinal)?;
        let library = KernelLibrary::load(&ctx, cache)?;
        let probe = Mutex::new(super::clock::ClockProbe::new(&ctx)?);
        let rt = Arc::new(Self { info, ctx, library, clock: Mutex::new(ClockCalibration::default()), probe });
        rt.recalibrate_clock()?;
        Ok(rt)
    }

    /// Allocates zeroed mapped host memory for a ring or a control block.
    pub fn mapped(&self, len: usize) -> Result<MappedMemory, GpuError> {
        MappedMemory::alloc(&self.ctx, len)
    }

    /// Maps and registers zeroed host memory for a frame ring, in huge pages
    /// when `huge` (see [`MappedMemory::register_ring_pages`]).
    pub fn mapped_ring(&self, len: usize, huge: bool) -> Result<MappedMemory, GpuError> {
        MappedMemory::register_ring_pages(&self.ctx, len, huge)
    }

    /// Re-measures the `%globaltimer` offset (e.g. periodically, against drift).
    pub fn recalibrate_clock(&self) -> Result<ClockCalibration, GpuError> {
        let c = self.probe.lock().unwrap_or_else(|p| p.into_inner()).calibrate(&self.library, 200)?;
        let mut clock = self.clock.lock().unwrap_or_else(|p| p.into_inner());
        *clock = c.with_drift_since(&clock);
        Ok(*clock)
    }

    pub fn clock(&self) -> ClockCalibration {
        *self.clock.lock().unwrap_or_else(|p| p.into_inner())
    }
}
