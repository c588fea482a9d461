//! A user data-ready handler (`[handler]`) as the resident loop's handler
//! fragment: the user's `__device__` function compiled by NVRTC together
//! with a generated `__global__` wrapper, `fl_user_handler`, that polls the
//! slot the next frame is due in, calls the function, and on a frame fills
//! the loop state the built-in handler would have filled.

use super::source::{EntryKind, UserCodeError, check_source, read_source};
use crate::fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec};
use crate::gpu::GpuError;
use crate::gpu::control::LoopParams;
use crate::gpu::driver::{self, DeviceBuffer, LaunchDims};
use crate::gpu::nvrtc::{CacheDir, Compiler};
use crate::gpu::runtime::GpuRuntime;
use crate::ops::handler::HandlerConfig;
use crate::ops::user_kernel::is_c_identifier;
use cudarc::driver::CudaFunction;
use cudarc::nvrtc::Ptx;
use std::ffi::c_void;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The generated wrapper kernel's name.
const WRAPPER_KERNEL: &str = "fl_user_handler";

/// The file name NVRTC sees for the generated wrapper.
const WRAPPER_FILE: &str = "frameloop-user-handler";

/// Bytes of `fl_handler_state` (frameloop.cuh).
const HANDLER_STATE_BYTES: usize = 64;

/// A user handler's source, as read from the `[handler]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserHandlerSource {
    /// The source's name in diagnostics (its path).
    pub file: String,
    /// The source text.
    pub text: String,
    /// The `__device__` function (`fl_handler_fn`).
    pub entry: String,
}

impl UserHandlerSource {
    /// Reads the `[handler]` section's source (relative to the directory of
    /// `config_file`, the file the section was loaded from).
    pub fn from_config(h: &HandlerConfig, config_file: &Path) -> Result<Self, UserCodeError> {
        let path = h.source_path(config_file);
        let text = read_source(&path)?;
        Ok(Self { file: path.display().to_string(), text, entry: h.entry.clone() })
    }
}

/// The wrapper kernel `fl_user_handler(LoopParams p, fl_handler_state* state)`
/// appended to the user's source (after a `#line` so that errors in it are
/// not reported against the user's file). One thread: polls the slot of ring
/// sequence `last_claimed + 1` within the loop's poll budget, honouring
/// tear-down and the loop timeout like `fl_poll`; on a frame fills
/// `DeviceLoopState::desc`, `slot` (the header copy the result record is
/// built from) and resets `chain`; always leaves the verdict for the
/// controller node. `state` is zeroed on the loop's first iteration.
fn wrapper_source(user_text: &str, entry: &str) -> String {
    debug_assert!(is_c_identifier(entry));
    format!(
        r#"{user_text}
#line 1 "{WRAPPER_FILE}"
#include "frameloop.cuh"
#include "ring_ready.cuh"

extern "C" __global__ void {WRAPPER_KERNEL}(LoopParams p, fl_handler_state* state) {{
  const uint64_t t0 = fl_globaltimer();
  DeviceLoopState* st = p.st;
  if (p.stage_markers) fl_mark_stage(p, FL_STAGE_HANDLER, st->last_claimed);
  // The controller counts iterations: none yet means the loop just started.
  if (st->iterations == 0) {{
    for (int i = 0; i < 8; ++i) state->words[i] = 0;
  }}
  if (st->last_frame_ns == 0) st->last_frame_ns = t0;
  const uint64_t seq = st->last_claimed + 1;
  const uint64_t slot_dptr = fl_slot_dptr(p, seq);
  fl_slot slot;
  slot.meta = (const uint32_t*)slot_dptr;
  slot.payload = (const uint8_t*)(slot_dptr + FL_SLOT_PAYLOAD_OFFSET);
  slot.index = (uint32_t)((seq - 1) % p.slot_count);
  slot.slot_count = p.slot_count;
  slot.capacity = p.payload_capacity;
  slot._reserved0 = 0;
  fl_frame frame;
  uint32_t verdict = FL_VERDICT_NONE;
  for (;;) {{
    if (fl_load_relaxed_sys(&p.ctl->tear_down.v)) {{
      verdict = FL_VERDICT_STOP;
      st->stop_state = (uint32_t)FL_STATE_TORN_DOWN;
      break;
    }}
    frame = fl_frame{{}};
    frame.ring_sequence = seq;
    if ({entry}(&slot, state, &frame) == 1u) {{
      verdict = FL_VERDICT_READY;
      break;
    }}
    const uint64_t now = fl_globaltimer();
    if (p.timeout_ns != 0 && now - st->last_frame_ns >= p.timeout_ns) {{
      verdict = FL_VERDICT_STOP;
      st->stop_state = (uint32_t)FL_STATE_TIMED_OUT;
      break;
    }}
    if (now - t0 >= p.poll_budget_ns) break;
    if (p.poll_interval_ns != 0) __nanosleep((unsigned)p.poll_interval_ns);
  }}
  if (verdict == FL_VERDICT_NONE && p.sleep_ns != 0) fl_sleep_interruptible(p, p.sleep_ns);
  if (verdict == FL_VERDICT_READY) {{
    const uint32_t len = frame.length_bytes < p.payload_capacity ? frame.length_bytes : p.payload_capacity;
    FrameDesc* d = &st->desc;
    d->payload_dptr = slot_dptr + FL_SLOT_PAYLOAD_OFFSET;
    d->slot_dptr = slot_dptr;
    d->ring_seq = seq;
    d->payload_len = len;
    d->n_samples = 0;
    d->skipped = 0;
    d->detect_ns = fl_globaltimer();
    SlotHeader s = SlotHeader{{}};
    s.ring_seq = seq;
    s.frame_seq = frame.sequence;
    s.stream_id = frame.stream_id;
    s.flags = frame.flags;
    s.payload_len = len;
    s.sender_ts_ns = frame.sender_ts_ns;
    st->slot = s;
    fl_reset_chain_result(&st->chain);
    st->last_claimed = seq;
    st->last_frame_ns = d->detect_ns;
    fl_store_relaxed_sys(&p.ring->claimed_seq, seq);
  }}
  st->verdict = verdict;
  st->handler_ns += fl_globaltimer() - t0;
}}
"#
    )
}

/// Compiles `src` with the wrapper to PTX for a virtual architecture, without
/// a GPU: the problems of the user's file, if any, else the PTX.
#[cfg(test)]
fn check_wrapper(src: &UserHandlerSource, arch: &str) -> Result<String, Vec<UserCodeError>> {
    let problems = check_source(&src.file, &src.text, &src.entry, EntryKind::Handler);
    if !problems.is_empty() {
        return Err(problems);
    }
    crate::gpu::nvrtc::compile_ptx(&src.file, &wrapper_source(&src.text, &src.entry), arch)
        .map_err(|e| vec![UserCodeError::Compiler { file: src.file.clone(), reason: e.to_string() }])
}

/// A compiled user handler, loaded into the runtime's context.
pub struct UserHandler {
    entry: String,
    function: CudaFunction,
    /// The handler's `fl_handler_state` (device memory, zeroed by the wrapper
    /// on the loop's first iteration).
    state: DeviceBuffer,
    _module: Arc<cudarc::driver::CudaModule>,
}

impl UserHandler {
    /// Checks and compiles `src` for the runtime's GPU (the cubin kept in the
    /// default cubin cache, keyed by the source like the built-in kernels)
    /// and loads the wrapper kernel.
    pub fn load(rt: &GpuRuntime, src: &UserHandlerSource) -> Result<Self, GpuError> {
        let setup = |problems: Vec<UserCodeError>| {
            let text: Vec<String> = problems.iter().map(|p| format!("handler.{}: {p}", p.key())).collect();
            GpuError::Setup(text.join("; "))
        };
        if !is_c_identifier(&src.entry) {
            return Err(GpuError::Setup(format!(
                "handler.entry {:?} is not a C identifier; name the __device__ function",
                src.entry
            )));
        }
        let problems = check_source(&src.file, &src.text, &src.entry, EntryKind::Handler);
        if !problems.is_empty() {
            return Err(setup(problems));
        }
        let compiler = Compiler::new(rt.library.arch(), CacheDir::Default)?;
        let cubin = compiler.cubin(&src.file, &wrapper_source(&src.text, &src.entry))?;
        let module = rt.ctx.load_module(Ptx::from_binary(cubin))?;
        let function = module.load_function(WRAPPER_KERNEL).map_err(|_| {
            GpuError::MissingKernel(format!("{WRAPPER_KERNEL} (the wrapper generated for {})", src.file))
        })?;
        let state = DeviceBuffer::new(&rt.ctx, HANDLER_STATE_BYTES, 0)?;
        Ok(Self { entry: src.entry.clone(), function, state, _module: module })
    }
}

/// The user handler as the handler fragment's one operator: launches the
/// wrapper with the loop parameters the executor fills in before capture.
pub(in crate::gpu) struct UserHandlerOperator {
    handler: UserHandler,
    name: String,
    params: Arc<Mutex<LoopParams>>,
}

impl UserHandlerOperator {
    pub(in crate::gpu) fn new(handler: UserHandler, params: Arc<Mutex<LoopParams>>) -> Self {
        let name = format!("handler {}", handler.entry);
        Self { handler, name, params }
    }
}

impl GpuResidentOperator for UserHandlerOperator {
    fn name(&self) -> &str {
        &self.name
    }
    fn setup(&mut self, _spec: &mut OperatorSpec) {}
    fn compute(&mut self, ctx: &mut ComputeContext<'_>) -> Result<(), FragmentError> {
        let mut p = *self.params.lock().unwrap_or_else(|e| e.into_inner());
        let mut state = self.handler.state.dptr();
        let mut args = [(&mut p as *mut LoopParams).cast::<c_void>(), (&mut state as *mut u64).cast()];
        // SAFETY: the wrapper takes (LoopParams, fl_handler_state*): a
        // LoopParams by value and a device address of HANDLER_STATE_BYTES
        // bytes that lives as long as this operator; one thread.
        unsafe { driver::launch_raw(ctx.stream(), &self.handler.function, LaunchDims::SINGLE, &mut args) }
            .map_err(|e| FragmentError::Operator { operator: self.name.clone(), problem: e.to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HSB: &str = include_str!("../../../handlers/hsb_ready.cu");

    fn hsb() -> UserHandlerSource {
        UserHandlerSource { file: "hsb_ready.cu".into(), text: HSB.into(), entry: "hsb_ready".into() }
    }

    #[test]
    fn the_wrapper_calls_the_entry_and_fills_the_loop_state() {
        let w = wrapper_source(HSB, "hsb_ready");
        assert!(w.starts_with(HSB));
        assert!(w.contains("hsb_ready(&slot, state, &frame) == 1u"));
        for filled in ["d->ring_seq = seq", "st->slot = s", "fl_reset_chain_result", "st->verdict = verdict"]
        {
            assert!(w.contains(filled), "{filled}");
        }
        assert!(w.contains("tear_down"), "the wrapper must honour tear-down");
    }

    #[test]
    fn the_hsb_example_compiles_inside_the_wrapper() {
        if !crate::gpu::nvrtc_present() {
            eprintln!("NVRTC not present; skipping");
            return;
        }
        let ptx = check_wrapper(&hsb(), "compute_90").unwrap_or_else(|p| panic!("{p:?}"));
        assert!(ptx.contains(&format!(".entry {WRAPPER_KERNEL}(")), "{ptx}");
    }

    /// `frameloop validate`'s problems for a config with `[handler]`.
    fn validate(handler: &str, backend: &str) -> Vec<crate::config::ConfigProblem> {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("hsb.cu"), HSB).unwrap();
        let cfg = crate::config::parse(&format!("backend = \"{backend}\"\n[handler]\n{handler}")).unwrap();
        super::super::source::check_user_code(&cfg, &dir.path().join("frameloop.toml"))
    }

    #[test]
    fn validate_checks_the_handler_and_refuses_it_on_the_host_backend() {
        let host = validate("source = \"hsb.cu\"\nentry = \"hsb_ready\"", "host");
        assert_eq!(host.len(), 1);
        assert_eq!(host[0].key, "handler.entry");
        assert!(host[0].message.contains("host backend cannot run it"), "{}", host[0].message);
        let missing = validate("source = \"nope.cu\"\nentry = \"hsb_ready\"", "cuda");
        assert_eq!(missing[0].key, "handler.source", "{missing:?}");
        if !crate::gpu::nvrtc_present() {
            eprintln!("NVRTC not present; skipping the compiled checks");
            return;
        }
        assert!(validate("source = \"hsb.cu\"\nentry = \"hsb_ready\"", "cuda").is_empty());
        let wrong = validate("source = \"hsb.cu\"\nentry = \"hsb_redy\"", "auto");
        assert_eq!(wrong.len(), 1, "{wrong:?}");
        assert_eq!(wrong[0].key, "handler.entry");
        assert!(
            wrong[0].message.contains("defines no __device__ function \"hsb_redy\""),
            "{}",
            wrong[0].message
        );
    }

    #[test]
    fn a_handler_with_the_wrong_signature_is_named_before_the_wrapper() {
        if !crate::gpu::nvrtc_present() {
            eprintln!("NVRTC not present; skipping");
            return;
        }
        let src = UserHandlerSource {
            file: "bad.cu".into(),
            text: "#include \"frameloop.cuh\"\n__device__ int bad(const fl_slot* s) { return 0; }\n".into(),
            entry: "bad".into(),
        };
        let problems = check_wrapper(&src, "compute_90").unwrap_err();
        assert!(matches!(problems[..], [UserCodeError::WrongSignature { .. }]), "{problems:?}");
    }
}
