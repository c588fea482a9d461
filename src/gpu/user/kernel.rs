//! A user CUDA kernel (`op = "kernel"`, `ops::user_kernel`) as a
//! GPU-resident operator: its source compiled by NVRTC (through the cubin
//! cache) and loaded into the executor's context when the graph is built,
//! its parameter block in device memory it owns, and per frame one graph
//! node: the user's code compiled as the device function of an entry
//! kernel (`user_source::entry_kernel_cubin`) that fills the operator's
//! `fl_frame` (kernels/user_frame.cuh), clamps the counts, and calls it.
//! A source that cannot be compiled that way (it fails, while the plain
//! source compiles) runs as before: a prologue node
//! (`fl_user_prologue`, kernels/user_support.cu) in front of the user's
//! own kernel. The chain's first user kernel reads the loop state's copy of the slot header; the
//! others copy its `fl_frame`'s fields. The frame's user result words are
//! zero when the chain starts (cleared after each publish).
//!
//! Ports: `in` (the previous operator's samples), `out` (this operator's
//! own output buffer, sized for its largest output) and `frame` (its
//! `fl_frame`, 64 bytes, then the entry kernel's block ticket; unconnected
//! so it is its own buffer). A correct kernel cannot write outside them:
//! its counts are clamped to the buffers' sizes.

#![deny(unsafe_op_in_unsafe_fn)]

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

use super::source::{WRAPPED_ENTRY, entry_kernel_cubin, kernel_cubin, kernel_text};
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
use crate::gpu::driver::DeviceBuffer;
use crate::gpu::nvrtc::{CacheDir, Compiler};
use crate::gpu::param_banks::{self, NO_PARAM_STEP};
use crate::ops::OpSpec;
use crate::ops::user_kernel::{OutputSize, UserKernelSpec};

/// Bytes of an `fl_frame` (kernels/frameloop.cuh).
pub const FRAME_BYTES: usize = 64;
/// Bytes of the `frame` port: the `fl_frame`, then the entry kernel's block
/// ticket (a `uint32_t` the last block resets) on its own 64 bytes.
const FRAME_PORT_BYTES: usize = FRAME_BYTES + 64;
/// Threads of the one block of `fl_user_prologue` (`FL_USER_PROLOGUE_THREADS`).
const PROLOGUE_THREADS: u32 = 32;

/// The chain with every user kernel's `source` made absolute, a relative
/// one taken relative to the directory of `config_file` (the file the chain
/// was loaded from) as the config documents; the operators read `source` as
/// it stands. Resolving twice changes nothing.
pub fn with_sources_resolved(chain: &[OpSpec], config_file: &Path) -> Vec<OpSpec> {
    chain
        .iter()
        .map(|op| match op {
            OpSpec::Kernel(k) if k.code.is_none() => {
                let path = k.source_path(config_file);
                let source = std::path::absolute(&path).unwrap_or(path);
                OpSpec::Kernel(UserKernelSpec { source, ..k.clone() })
            }
            other => other.clone(),
        })
        .collect()
}

/// The loaded kernel and the device memory it reads, made by the first `compute`.
struct Loaded {
    /// Kept so that `function` stays loaded.
    _module: Arc<CudaModule>,
    function: CudaFunction,
    /// `function` is the entry kernel wrapped around the user's code (one
    /// node per frame), not the user's kernel behind a prologue.
    wrapped: bool,
    /// The parameter block (`param_block()`), `None` without parameters.
    /// Read by the kernel on every frame, so that it can be rewritten live.
    params: Option<DeviceBuffer>,
}

/// Compiles user kernel `spec` for `ctx`'s GPU (or takes it from the cubin
/// cache) as the entry kernel wrapped around it, else as a kernel behind a
/// prologue; `.1` says which. `announce`: log why a source runs behind a
/// prologue (once per load, not again for a compile ahead of it).
fn compile(
    spec: &UserKernelSpec,
    name: &str,
    ctx: &Arc<CudaContext>,
    announce: bool,
) -> Result<(Vec<u8>, bool), FragmentError> {
    let problem = |p: String| FragmentError::Operator { operator: name.to_owned(), problem: p };
    let (major, minor) =
        ctx.compute_capability().map_err(|e| problem(format!("reading the GPU's architecture: {e}")))?;
    let compiler = Compiler::new(&format!("sm_{major}{minor}"), CacheDir::Default)
        .map_err(|e| problem(e.to_string()))?;
    let (file, text) = kernel_text(spec, None).map_err(|e| problem(e.to_string()))?;
    let threads = spec.launch(1).threads;
    match entry_kernel_cubin(&compiler, &file, &text, &spec.entry, threads) {
        Ok(cubin) => Ok((cubin, true)),
        Err(wrapping) => {
            let cubin = kernel_cubin(&compiler, &file, &text, &spec.entry).map_err(|errors| {
                let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
                problem(list.join("; "))
            })?;
            if announce {
                let why: Vec<String> = wrapping.iter().map(ToString::to_string).collect();
                tracing::warn!(
                    "{name}: the source does not compile as the device function of an entry kernel \
                     ({}); it runs behind a prologue node, which costs one more kernel per frame",
                    why.join("; ")
                );
            }
            Ok((cubin, false))
        }
    }
}

/// Compiles the user kernels of `chain` into the cubin cache while the
/// running graph goes on, so that building the chain afterwards only loads
/// them (a module load waits for the running graph: it happens once the
/// graph stopped). Without a writable cache the build compiles again.
pub fn compile_ahead(ctx: &Arc<CudaContext>, chain: &[OpSpec]) -> Result<(), FragmentError> {
    for (i, op) in chain.iter().enumerate() {
        if let OpSpec::Kernel(k) = op {
            compile(k, &format!("chain[{i}] kernel \"{}\"", k.entry), ctx, false)?;
        }
    }
    Ok(())
}

/// `op = "kernel"`: the user's kernel behind its prologue.
pub struct UserKernelOp {
    name: String,
    spec: UserKernelSpec,
    /// The parameter struct's bytes, checked when the operator was made.
    params: Vec<u8>,
    max_in: usize,
    max_out: usize,
    /// The chain's first user kernel: its prologue reads the slot header and
    /// zeroes the user words, and it publishes its `fl_frame` in `first_frame`.
    first: bool,
    /// Device address of the chain's first user kernel's `fl_frame`, shared
    /// by the chain's user kernels; set when the first one is enqueued.
    first_frame: Arc<AtomicU64>,
    /// This operator's step in the loop's parameter banks, where the
    /// kernel takes its parameter struct from on every frame (`param_step`
    /// of `fl_user_entry` and `fl_user_prologue`), or `NO_PARAM_STEP`: the
    /// struct is then the one written when the kernel was loaded.
    param_step: u32,
    loaded: Option<Loaded>,
}

/// What the user kernels of one chain share: made once per chain by
/// [`UserKernels::new`], handed to each of its user kernels in order.
#[derive(Default)]
pub struct UserKernels {
    first_frame: Arc<AtomicU64>,
    count: usize,
}

impl UserKernels {
    pub fn new() -> Self {
        Self::default()
    }

    /// The chain's next user kernel (see [`UserKernelOp::new`]).
    pub fn next(
        &mut self,
        name: &str,
        spec: &UserKernelSpec,
        max_in: usize,
    ) -> Result<UserKernelOp, FragmentError> {
        let op = UserKernelOp::new(name, spec, max_in, self.count == 0, Arc::clone(&self.first_frame))?;
        self.count += 1;
        Ok(op)
    }
}

impl UserKernelOp {
    /// The user kernel of `spec` over at most `max_in` input samples per
    /// frame, named `name` (`chain[i] kernel "entry"`). `first`: the first
    /// user kernel of its chain, enqueued before the others that share
    /// `first_frame`. The source is read when the graph is built.
    fn new(
        name: &str,
        spec: &UserKernelSpec,
        max_in: usize,
        first: bool,
        first_frame: Arc<AtomicU64>,
    ) -> Result<Self, FragmentError> {
        let problem = |p: String| FragmentError::Operator { operator: name.to_owned(), problem: p };
        let problems = spec.problems();
        if !problems.is_empty() {
            let list: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.key, p.message)).collect();
            return Err(problem(list.join("; ")));
        }
        let params = spec.param_block().map_err(|_| problem("invalid parameters".to_owned()))?;
        let max_out = match spec.output {
            OutputSize::Same => max_in,
            OutputSize::Samples(n) => n as usize,
        };
        Ok(Self {
            name: name.to_owned(),
            spec: spec.clone(),
            params,
            max_in,
            max_out,
            first,
            first_frame,
            param_step: NO_PARAM_STEP,
            loaded: None,
        })
    }

    /// Reads the parameter struct from step `step` of the frame's parameter
    /// bank (when the loop has banks) if the banks carry it
    /// ([`param_banks::banked_user_params`]); otherwise a no-op.
    pub fn with_param_step(mut self, step: u32) -> Self {
        if param_banks::banked_user_params(&self.spec).is_some() {
            self.param_step = step;
        }
        self
    }

    /// Samples of the largest output: the `out` port's size in floats, and
    /// the input of the operator after it.
    pub fn max_output_samples(&self) -> usize {
        self.max_out
    }

    fn problem(&self, p: impl Into<String>) -> FragmentError {
        FragmentError::Operator { operator: self.name.clone(), problem: p.into() }
    }

    /// Compiles (or takes from the cubin cache) and loads the kernel into
    /// `stream`'s context and uploads the parameters, once.
    fn load(&mut self, stream: &Arc<CudaStream>) -> Result<(), FragmentError> {
        if self.loaded.is_none() {
            let ctx = stream.context();
            let (cubin, wrapped) = compile(&self.spec, &self.name, ctx, true)?;
            let file = self.spec.source_name();
            let module = ctx
                .load_module(Ptx::from_binary(cubin))
                .map_err(|e| self.problem(format!("loading the compiled {file}: {e}")))?;
            let name = if wrapped { WRAPPED_ENTRY } else { self.spec.entry.as_str() };
            let function = module
                .load_function(name)
                .map_err(|e| self.problem(format!("{file} has no kernel \"{name}\": {e}")))?;
            let params = if self.params.is_empty() {
                None
            } else {
                let b = DeviceBuffer::new(ctx, self.params.len().next_multiple_of(4), 0)
                    .map_err(|e| self.problem(e.to_string()))?;
                b.write(0, &self.params).map_err(|e| self.problem(e.to_string()))?;
                Some(b)
            };
            self.loaded = Some(Loaded { _module: module, function, wrapped, params });
        }
        Ok(())
    }
}

/// `out` samples the configured `output` asks for per frame: 0 for `"same"`
/// (the prologue uses the input count), else N.
fn fixed_output(spec: &UserKernelSpec) -> u32 {
    match spec.output {
        OutputSize::Same => 0,
        OutputSize::Samples(n) => n,
    }
}

/// Bytes of an f32 buffer of `samples` (at least one sample).
fn sample_bytes(samples: usize) -> usize {
    samples.max(1).saturating_mul(std::mem::size_of::<f32>())
}

impl GpuResidentOperator for UserKernelOp {
    fn name(&self) -> &str {
        &self.name
    }

    fn setup(&mut self, spec: &mut OperatorSpec) {
        spec.input("in", PortMemory::Size(sample_bytes(self.max_in)))
            .output("out", PortMemory::Size(sample_bytes(self.max_out)))
            .output("frame", PortMemory::Size(FRAME_PORT_BYTES));
    }

    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let (x, y, frame) = (ctx.port("in")?, ctx.port("out")?, ctx.port("frame")?);
        if frame.bytes < FRAME_PORT_BYTES || x.dptr == y.dptr {
            return Err(self.problem("its ports were bound to memory it did not declare"));
        }
        let user = ctx.user_result().ok_or_else(|| {
            self.problem("runs only in the resident executor, which keeps the frame's user result words")
        })?;
        let in_capacity = u32::try_from(x.bytes / 4).unwrap_or(u32::MAX);
        let out_capacity = u32::try_from(y.bytes / 4).unwrap_or(u32::MAX);
        let (fd, stream) = (ctx.frame_desc(), ctx.stream());
        let slot = ctx.slot_header().ok_or_else(|| {
            self.problem("runs only in the resident executor, which keeps a copy of the slot header")
        })?;
        let fixed_out = fixed_output(&self.spec);
        let first_frame = if self.first {
            self.first_frame.store(frame.dptr, Ordering::Relaxed);
            0
        } else {
            match self.first_frame.load(Ordering::Relaxed) {
                0 => return Err(self.problem("enqueued before the chain's first user kernel")),
                f => f,
            }
        };
        let shape = self.spec.launch(out_capacity);
        // Before the first node, so that a source that does not compile enqueues nothing.
        self.load(stream)?;
        let loaded = self.loaded.as_ref().ok_or_else(|| self.problem("the kernel is not loaded"))?;

        let params = loaded.params.as_ref().map_or(0, DeviceBuffer::dptr);
        let cfg = LaunchConfig {
            grid_dim: (shape.blocks, 1, 1),
            block_dim: (shape.threads, 1, 1),
            shared_mem_bytes: shape.shared_bytes,
        };
        if loaded.wrapped {
            let ticket = frame.dptr + FRAME_BYTES as u64;
            // The chain's last operator publishes the result itself: no end-marker node.
            let publisher = ctx.take_result_publisher().unwrap_or(0);
            let mut launch = stream.launch_builder(&loaded.function);
            launch
                .arg(&fd)
                .arg(&slot)
                .arg(&frame.dptr)
                .arg(&ticket)
                .arg(&first_frame)
                .arg(&in_capacity)
                .arg(&out_capacity)
                .arg(&fixed_out)
                .arg(&publisher)
                .arg(&x.dptr)
                .arg(&y.dptr)
                .arg(&params)
                .arg(&user)
                .arg(&self.param_step);
            // SAFETY: the arguments are fl_user_entry's (user_source::ENTRY_WRAPPER):
            // FrameDesc*, the loop state's SlotHeader copy beside it, fl_frame* and its
            // uint32_t ticket (the `frame` port: 64 bytes then the ticket, checked above,
            // zeroed when allocated and reset by the last block), the first user kernel's
            // fl_frame or 0, three uint32_t counts, the LoopParams* the executor offered
            // (its last block calls fl_publish_result once, after every block's work) or
            // 0, then the user kernel's (const float*, float*, const void*, fl_user_result*),
            // whose signature entry_kernel_cubin checked, and the uint32_t bank step (a
            // struct of params.len() <= BANKED_PARAM_BYTES bytes when not NO_PARAM_STEP,
            // so the bank step's coefficient words hold it). Every pointer is device memory
            // that outlives the graph; the counts the user code sees are clamped to the
            // ports. The shape was checked by UserKernelSpec::problems (threads <= 1024,
            // shared bytes <= 48 KiB) and is the block size the kernel was compiled for.
            unsafe { launch.launch(cfg) }.map_err(|e| self.problem(format!("launching the kernel: {e}")))?;
            return Ok(());
        }

        let param_bytes = self.params.len() as u32;
        let prologue = ctx.kernel("fl_user_prologue")?;
        let mut launch = stream.launch_builder(prologue);
        launch
            .arg(&fd)
            .arg(&slot)
            .arg(&frame.dptr)
            .arg(&first_frame)
            .arg(&user)
            .arg(&in_capacity)
            .arg(&out_capacity)
            .arg(&fixed_out)
            .arg(&params)
            .arg(&param_bytes)
            .arg(&self.param_step);
        let one_warp =
            LaunchConfig { grid_dim: (1, 1, 1), block_dim: (PROLOGUE_THREADS, 1, 1), shared_mem_bytes: 0 };
        // SAFETY: (FrameDesc*, const SlotHeader*, fl_frame*, const fl_frame*,
        // fl_user_result*, uint32_t x3, void*, uint32_t x2) is fl_user_prologue's signature;
        // it writes the 64 bytes of `frame` (checked above), the 48 user result bytes the
        // executor keeps, the FrameDesc's sample count and, with a bank step, the
        // `param_bytes` of this operator's parameter buffer (allocated with exactly that
        // size, at most BANKED_PARAM_BYTES then); it reads the loop state's SlotHeader copy
        // and `first_frame` (0, or the first user kernel's 64-byte `frame` port, enqueued
        // before this one); one block of its 32 threads.
        unsafe { launch.launch(one_warp) }.map_err(|e| ctx.enqueue_error("fl_user_prologue", e))?;

        let mut launch = stream.launch_builder(&loaded.function);
        launch.arg(&frame.dptr).arg(&x.dptr).arg(&y.dptr).arg(&params).arg(&user);
        // SAFETY: user_source::kernel_cubin checked at compile time that the entry has the
        // fl_kernel_fn signature (const fl_frame*, const float*, float*, const void*,
        // fl_user_result*); every pointer is device memory that outlives the graph (ports
        // and the user words are the executor's, `params` is this operator's), and the
        // counts in `frame` are clamped to the buffers. The shape was checked by
        // UserKernelSpec::problems (threads <= 1024, shared bytes <= 48 KiB).
        unsafe { launch.launch(cfg) }.map_err(|e| self.problem(format!("launching the kernel: {e}")))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::user::source::UserCodeError;
    use crate::ops::SampleFormat;

    fn spec(text: &str) -> UserKernelSpec {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn output_size_follows_the_config() {
        let mut chain = UserKernels::new();
        let same = chain.next("k", &spec("source='a.cu'\nentry='k'"), 1000).unwrap();
        assert_eq!(same.max_output_samples(), 1000);
        let fixed = spec("source='a.cu'\nentry='k'\noutput={samples=16}");
        let second = chain.next("k2", &fixed, 1000).unwrap();
        assert_eq!(second.max_output_samples(), 16);
        assert!(same.first && !second.first, "only the chain's first user kernel reads the slot");
        assert!(Arc::ptr_eq(&same.first_frame, &second.first_frame));
        assert_eq!(fixed_output(&fixed), 16);
        assert_eq!(fixed_output(&spec("source='a.cu'\nentry='k'")), 0);
    }

    #[test]
    fn the_bench_user_kernels_compile_against_the_abi() {
        if !crate::gpu::nvrtc_present() {
            eprintln!("skipped: NVRTC cannot be loaded (`. scripts/env.sh`)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let compiler = Compiler::new("sm_90", CacheDir::At(dir.path().to_path_buf())).unwrap();
        let kernels = Path::new(env!("CARGO_MANIFEST_DIR")).join("bench/kernels");
        for (file, entry) in [("fir5.cu", "fir5"), ("stats_threshold.cu", "stats_threshold")] {
            let text = std::fs::read_to_string(kernels.join(file)).unwrap();
            let cubin =
                kernel_cubin(&compiler, file, &text, entry).unwrap_or_else(|e| panic!("{file}: {e:?}"));
            assert_eq!(&cubin[..4], b"\x7fELF", "{file}");
        }
    }

    #[test]
    fn user_kernels_compile_into_their_entry_kernel() {
        if !crate::gpu::nvrtc_present() {
            eprintln!("skipped: NVRTC cannot be loaded (`. scripts/env.sh`)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let compiler = Compiler::new("sm_90", CacheDir::At(dir.path().to_path_buf())).unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let kernels = [
            ("bench/kernels/fir5.cu", "fir5", 256),
            ("bench/kernels/stats_threshold.cu", "stats_threshold", 1024),
            ("tests/fixtures/user_kernels/gain_offset.cu", "gain_offset", 128),
            ("tests/fixtures/user_kernels/window_sum.cu", "window_sum", 256),
            ("tests/fixtures/user_kernels/frame_words.cu", "frame_words", 64),
            ("tests/fixtures/user_kernels/trap_at.cu", "trap_at", 256),
        ];
        for (file, entry, threads) in kernels {
            let text = std::fs::read_to_string(root.join(file)).unwrap();
            let cubin = entry_kernel_cubin(&compiler, file, &text, entry, threads)
                .unwrap_or_else(|e| panic!("{file}: {e:?}"));
            assert_eq!(&cubin[..4], b"\x7fELF", "{file}");
        }
        // The user's file and line survive the wrapping; a missing entry is named.
        let text = std::fs::read_to_string(root.join("tests/fixtures/user_kernels/syntax_error.cu")).unwrap();
        let errors = entry_kernel_cubin(&compiler, "syntax_error.cu", &text, "broken", 256).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| matches!(e, UserCodeError::Compile { file, .. } if file == "syntax_error.cu")),
            "{errors:?}"
        );
        let text = std::fs::read_to_string(root.join("tests/fixtures/user_kernels/gain_offset.cu")).unwrap();
        let errors =
            entry_kernel_cubin(&compiler, "gain_offset.cu", &text, "no_such_kernel", 256).unwrap_err();
        assert!(errors.iter().any(|e| matches!(e, UserCodeError::MissingEntry { .. })), "{errors:?}");
    }

    #[test]
    fn bad_specs_are_refused_with_their_keys() {
        let bad = spec("source='a.cu'\nentry='k'\nparams={g=1.5}\nparam_types=['g: u32']");
        let err = UserKernels::new().next("chain[1] kernel \"k\"", &bad, 10).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("chain[1] kernel \"k\"") && text.contains("params.g"), "{text}");
    }

    #[test]
    fn relative_sources_are_resolved_against_the_config_file() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Kernel(spec("source='k/gain.cu'\nentry='gain'")),
            OpSpec::Kernel(spec("source='/abs/sum.cu'\nentry='sum'")),
        ];
        let resolved = with_sources_resolved(&chain, Path::new("/etc/frameloop/frameloop.toml"));
        assert_eq!(resolved[0], chain[0]);
        let sources: Vec<_> = resolved[1..]
            .iter()
            .map(|op| match op {
                OpSpec::Kernel(k) => k.source.clone(),
                _ => unreachable!(),
            })
            .collect();
        assert_eq!(sources, [Path::new("/etc/frameloop/k/gain.cu"), Path::new("/abs/sum.cu")]);
        let relative = with_sources_resolved(&chain, Path::new("conf/frameloop.toml"));
        let OpSpec::Kernel(k) = &relative[1] else { unreachable!() };
        assert_eq!(k.source, std::env::current_dir().unwrap().join("conf/k/gain.cu"));
        assert_eq!(with_sources_resolved(&relative, Path::new("elsewhere/x.toml")), relative, "idempotent");
    }
}
