//! The `fft` operator on the GPU: a window kernel, one batched cuFFT
//! real-to-complex transform and a magnitude/power kernel (`fft.cu` beside this file),
//! all enqueued on the capture stream so that they become nodes of the
//! resident graph's IF body. Its meaning is `ops::fft` (the CPU reference).
//!
//! The transform's batch is fixed: the rows of the largest frame. The window
//! kernel zero-fills the rows past the frame's end, and the spectrum kernel
//! writes only the frame's bins and makes `FrameDesc::n_samples` their count.
//!
//! cuFFT is loaded (dlopen, through cudarc's dynamic loading) only when the
//! first `compute` makes the plan (`cuda::fft::CufftPlan`), so a build without libcufft runs every
//! chain without an fft. The plan and its work area live as long as the
//! operator, which the executor keeps for the loop's lifetime.

#![deny(unsafe_op_in_unsafe_fn)]

use std::sync::Arc;

use cudarc::driver::{CudaStream, DeviceRepr, LaunchConfig, PushKernelArg};

use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::ops::{FftOutput, FftSpec};

use super::launch::{MAX_GRID, OP_THREADS};
use crate::cuda::fft::CufftPlan;
pub use crate::cuda::fft::cufft_present;

/// Parameters of `fl_fft_window` and `fl_fft_spectrum`, passed by value
/// (mirrors `FftParams` in `fft.cu`).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FftParams {
    /// Samples per row (`2..=MAX_FFT_LEN`).
    pub n: u32,
    /// `n / 2 + 1`.
    pub bins: u32,
    /// Rows of the transform's batch: whole rows of the largest frame.
    pub max_rows: u32,
    /// `FftWindow::code`.
    pub window: u32,
    /// 1 for power, 0 for magnitude.
    pub power: u32,
    pub scale: f32,
}

// SAFETY: plain #[repr(C)] data with the layout of the CUDA struct.
unsafe impl DeviceRepr for FftParams {}

/// What to install when cuFFT is missing.
const CUFFT_MISSING: &str = "cuFFT (libcufft.so, from the CUDA toolkit or the nvidia-cufft wheel) is not on the \
     loader path; install it and add its lib directory to LD_LIBRARY_PATH, or remove the fft operator from the chain";

/// `fft`: port `in` (the chain's samples), `out` (the spectrum,
/// `max_rows * (n/2 + 1)` floats), and three scratch ports of its own
/// (unconnected, so each gets its own buffer): `windowed` (the batch's
/// input), `bins` (cuFFT's complex output) and `rows` (the frame's row count,
/// from the window kernel to the spectrum kernel).
pub struct FftOp {
    name: String,
    params: FftParams,
    max_samples: usize,
    /// Made by the first `compute`; `None` before, and always when the
    /// largest frame holds no whole row (nothing to transform).
    plan: Option<CufftPlan>,
}

impl FftOp {
    /// An fft over frames of at most `max_samples` input samples; `spec` is validated.
    pub fn new(name: &str, spec: &FftSpec, max_samples: usize) -> Result<Self, FragmentError> {
        let problem = |p: String| FragmentError::Operator { operator: name.to_owned(), problem: p };
        let max_rows = u32::try_from(spec.rows_in(max_samples))
            .map_err(|_| problem(format!("{max_samples} samples per frame is over 2^32 rows")))?;
        let bins = u32::try_from(spec.bins()).map_err(|_| problem(format!("n = {} is too long", spec.n)))?;
        if spec.n < crate::ops::fft::MIN_FFT_LEN || spec.n > crate::ops::fft::MAX_FFT_LEN {
            return Err(problem(format!("n = {} is outside the row lengths the fft takes", spec.n)));
        }
        let params = FftParams {
            n: spec.n,
            bins,
            max_rows,
            window: spec.window.code(),
            power: u32::from(spec.output == FftOutput::Power),
            scale: spec.effective_scale(),
        };
        Ok(Self { name: name.to_owned(), params, max_samples, plan: None })
    }

    /// Samples of the spectrum of the largest frame: the `out` port's size in floats.
    pub fn max_output_samples(&self) -> usize {
        self.params.max_rows as usize * self.params.bins as usize
    }

    fn batch_floats(&self) -> usize {
        self.params.max_rows as usize * self.params.n as usize
    }

    fn problem(&self, p: impl Into<String>) -> FragmentError {
        FragmentError::Operator { operator: self.name.clone(), problem: p.into() }
    }

    /// The plan, made on first use and bound to `stream`.
    fn plan_on(&mut self, stream: &Arc<CudaStream>) -> Result<&CufftPlan, FragmentError> {
        if self.plan.is_none() {
            if !cufft_present() {
                return Err(self.problem(CUFFT_MISSING));
            }
            stream
                .context()
                .bind_to_thread()
                .map_err(|e| self.problem(format!("binding the context: {e}")))?;
            let plan = CufftPlan::r2c(self.params.n, self.params.max_rows)
                .map_err(|e| self.problem(e.to_string()))?;
            self.plan = Some(plan);
        }
        let plan = self.plan.as_ref().ok_or_else(|| self.problem("the cuFFT plan is missing"))?;
        // SAFETY: the plan was made with the stream's context bound (above),
        // the executor's one context, which all its streams share.
        unsafe { plan.bind(stream) }
            .map_err(|e| FragmentError::Operator { operator: self.name.clone(), problem: e.to_string() })?;
        Ok(plan)
    }
}

fn config(items: usize) -> LaunchConfig {
    let items = u32::try_from(items).unwrap_or(u32::MAX);
    let grid = items.div_ceil(OP_THREADS).clamp(1, MAX_GRID);
    LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (OP_THREADS, 1, 1), shared_mem_bytes: 0 }
}

/// Bytes of a port of `items` values of `size` bytes (at least one value).
fn port_bytes(items: usize, size: usize) -> usize {
    items.max(1).saturating_mul(size)
}

impl GpuResidentOperator for FftOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        let f32_bytes = std::mem::size_of::<f32>();
        spec.input("in", PortMemory::Size(port_bytes(self.max_samples, f32_bytes)))
            .output("out", PortMemory::Size(port_bytes(self.max_output_samples(), f32_bytes)))
            .output("windowed", PortMemory::Size(port_bytes(self.batch_floats(), f32_bytes)))
            .output("bins", PortMemory::Size(port_bytes(self.max_output_samples(), 2 * f32_bytes)))
            .output("rows", PortMemory::Size(std::mem::size_of::<u32>()));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let (x, y) = (ctx.port("in")?, ctx.port("out")?);
        let (windowed, bins, rows) = (ctx.port("windowed")?, ctx.port("bins")?, ctx.port("rows")?);
        let batch = self.batch_floats();
        let fits =
            windowed.bytes / 4 >= batch && bins.bytes / 8 >= self.max_output_samples() && rows.bytes >= 4;
        if !fits {
            return Err(self.problem("a scratch port is smaller than the batch it was declared for"));
        }
        let capacity_in = u32::try_from(x.bytes / 4).unwrap_or(u32::MAX);
        let capacity_out = u32::try_from(y.bytes / 4).unwrap_or(u32::MAX);
        let (fd, stream, p) = (ctx.frame_desc(), ctx.stream(), self.params);

        let window = ctx.kernel("fl_fft_window")?;
        let mut launch = stream.launch_builder(window);
        launch.arg(&fd).arg(&x.dptr).arg(&capacity_in).arg(&windowed.dptr).arg(&rows.dptr).arg(&p);
        // SAFETY: (const FrameDesc*, const float*, uint32_t, float*, uint32_t*, FftParams) is
        // fl_fft_window's signature; it reads at most `capacity_in` floats of `in`, writes the
        // batch's max_rows * n floats of `windowed` (checked above) and one word of `rows`.
        unsafe { launch.launch(config(batch)) }.map_err(|e| ctx.enqueue_error("fl_fft_window", e))?;
        // With no whole row in the largest frame there is nothing to transform:
        // the window kernel stores 0 rows and every spectrum is empty.
        if self.params.max_rows > 0 {
            let plan = self.plan_on(stream)?;
            // SAFETY: `windowed` holds the batch's max_rows * n floats and `bins` its
            // max_rows * (n/2+1) complex values (checked above); both are port buffers the
            // executor keeps for the loop's lifetime.
            unsafe { plan.exec(windowed.dptr, bins.dptr) }.map_err(|e| FragmentError::Operator {
                operator: self.name.clone(),
                problem: e.to_string(),
            })?;
        }

        let spectrum = ctx.kernel("fl_fft_spectrum")?;
        let mut launch = stream.launch_builder(spectrum);
        launch.arg(&fd).arg(&bins.dptr).arg(&rows.dptr).arg(&y.dptr).arg(&capacity_out).arg(&p);
        // SAFETY: (FrameDesc*, const FftComplex*, const uint32_t*, float*, uint32_t, FftParams) is
        // fl_fft_spectrum's signature; it reads at most max_rows * bins complex values of `bins`
        // (its size, checked above), writes at most `capacity_out` floats of `out` and the
        // FrameDesc's sample count.
        unsafe { launch.launch(config(self.max_output_samples())) }
            .map_err(|e| ctx.enqueue_error("fl_fft_spectrum", e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::FftWindow;

    #[test]
    fn params_follow_the_spec_and_the_largest_frame() {
        let spec = FftSpec { n: 1000, window: FftWindow::Blackman, output: FftOutput::Power, scale: None };
        let op = FftOp::new("fft[1]", &spec, 4500).unwrap();
        let want = FftParams { n: 1000, bins: 501, max_rows: 4, window: 3, power: 1, scale: 1e-3 };
        assert_eq!(op.params, want);
        assert_eq!(op.max_output_samples(), 2004);
        assert_eq!(std::mem::size_of::<FftParams>(), 24);
        let tiny = FftOp::new("fft[1]", &FftSpec::new(1024), 100).unwrap();
        assert_eq!((tiny.params.max_rows, tiny.max_output_samples()), (0, 0));
        assert!(FftOp::new("fft[1]", &FftSpec::new(1), 100).is_err());
    }
}
