//! User CUDA sources named in the config (kernels, data-ready handlers):
//! compiled by NVRTC with `frameloop.cuh` on the include path, their entry's
//! existence and signature checked, and NVRTC's errors turned into problems
//! naming the file, line and the compiler's message. Needs NVRTC, not a GPU.

use crate::config::{BackendChoice, Config, ConfigProblem};
use crate::gpu::nvrtc::{self, Compiler};
use crate::gpu::{GpuError, nvrtc_present};
use crate::ops::OpSpec;
use crate::ops::handler::HandlerConfig;
use crate::ops::user_kernel::is_c_identifier;
use std::path::Path;
use thiserror::Error;

/// Virtual architecture user sources are checked for (the oldest CUDA 13 supports).
const CHECK_ARCH: &str = "compute_75";

/// Largest user source read (bytes).
pub const MAX_SOURCE_BYTES: u64 = 4 << 20;

/// The file name NVRTC sees for the appended signature check.
const CHECK_FILE: &str = "frameloop-entry-check";

/// What a user source defines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A chain operator: `extern "C" __global__`, [`EntryKind::signature`].
    Kernel,
    /// A data-ready handler: a `__device__` function, [`EntryKind::signature`].
    Handler,
}

impl EntryKind {
    /// The function type in `frameloop.cuh` the entry must have.
    fn fn_type(self) -> &'static str {
        match self {
            EntryKind::Kernel => "fl_kernel_fn",
            EntryKind::Handler => "fl_handler_fn",
        }
    }

    /// The declaration the entry must have, for messages.
    pub fn signature(self, entry: &str) -> String {
        match self {
            EntryKind::Kernel => format!(
                "extern \"C\" __global__ void {entry}(const fl_frame* frame, const float* in, float* out, \
                 const void* params, fl_user_result* user)"
            ),
            EntryKind::Handler => format!(
                "__device__ uint32_t {entry}(const fl_slot* slot, fl_handler_state* state, fl_frame* frame)"
            ),
        }
    }
}

/// A problem of one user source, saying how to fix it.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum UserCodeError {
    /// A user source cannot be read; check the path (relative to the config file's folder).
    #[error(
        "cannot read {path}: {source}; check the path (a relative path is relative to the config file's directory)"
    )]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// A user source is not a regular file of reasonable size; name a `.cu` file.
    #[error(
        "{path} is not a CUDA source ({bytes} bytes, or not a regular file); name a .cu file of at most {MAX_SOURCE_BYTES} bytes"
    )]
    NotASource { path: String, bytes: u64 },
    /// The user source does not compile; fix the line the compiler names.
    #[error("{file}({line}): error: {message}")]
    Compile { file: String, line: u32, message: String },
    /// NVRTC failed without a line to blame; check the CUDA toolkit install.
    #[error("{file}: NVRTC could not compile it: {reason}; check the CUDA toolkit install")]
    Compiler { file: String, reason: String },
    /// The user source lacks the named entry point; define it with the signature given.
    #[error("{file} defines no {kind} \"{entry}\"{found}; define {signature}")]
    MissingEntry { file: String, entry: String, kind: &'static str, found: String, signature: String },
    /// The entry point has the wrong signature; declare it as the message shows.
    #[error("{file}: \"{entry}\" does not have the signature frameloop.cuh requires; declare it {signature}")]
    WrongSignature { file: String, entry: String, signature: String },
    /// NVRTC cannot be loaded; install the CUDA 13 toolkit or the nvidia-cuda-nvrtc wheel and add
    /// it to `LD_LIBRARY_PATH`.
    #[error(
        "NVRTC (libnvrtc.so.13) cannot be loaded, so {file} was not compiled; install the CUDA 13 toolkit or the nvidia-cuda-nvrtc wheel and add its lib directory to LD_LIBRARY_PATH"
    )]
    NoNvrtc { file: String },
}

impl UserCodeError {
    /// The config key under `chain[i].` the problem belongs to.
    pub fn key(&self) -> &'static str {
        match self {
            UserCodeError::MissingEntry { .. } | UserCodeError::WrongSignature { .. } => "entry",
            _ => "source",
        }
    }
}

/// `text` with the entry's signature check appended: a second file (by
/// `#line`) that only compiles when `entry` exists with the right type.
fn with_entry_check(text: &str, entry: &str, kind: EntryKind) -> String {
    format!("{text}\n#line 1 \"{CHECK_FILE}\"\n#include \"frameloop.cuh\"\n{}", signature_check(entry, kind))
}

/// The line that compiles only when `entry` has `kind`'s function type.
fn signature_check(entry: &str, kind: EntryKind) -> String {
    format!(
        "static_assert(fl_same<decltype(&{entry}), {}>::value, \"frameloop: wrong signature\");\n",
        kind.fn_type()
    )
}

/// Whether `cubin` holds the code of the `extern "C"` kernel `name` (the ELF
/// section `.text.<name>`).
fn defines_kernel(cubin: &[u8], name: &str) -> bool {
    let section = format!(".text.{name}\0");
    cubin.windows(section.len()).any(|w| w == section.as_bytes())
}

/// The errors of an NVRTC log: `(file, line, message)` of every `file(line): error: message`.
fn parse_log(log: &str) -> Vec<(String, u32, String)> {
    log.lines()
        .filter_map(|l| {
            let (place, message) =
                l.split_once("): error: ").or_else(|| l.split_once("): catastrophic error: "))?;
            let (file, line) = place.rsplit_once('(')?;
            Some((file.to_string(), line.parse().ok()?, message.trim().to_string()))
        })
        .collect()
}

/// Turns a failed compile of `file` (with the entry check) into problems:
/// the errors in the user's file if there are any, else the entry's.
fn compile_problems(err: GpuError, file: &str, entry: &str, kind: EntryKind) -> Vec<UserCodeError> {
    let GpuError::Compile { reason, log, .. } = err else {
        return vec![UserCodeError::Compiler { file: file.to_string(), reason: err.to_string() }];
    };
    let errors = parse_log(&log);
    let (check, own): (Vec<_>, Vec<_>) = errors.into_iter().partition(|(f, _, _)| f == CHECK_FILE);
    if !own.is_empty() {
        return own
            .into_iter()
            .map(|(file, line, message)| UserCodeError::Compile { file, line, message })
            .collect();
    }
    match check.first() {
        Some((_, _, m)) if m.contains("is undefined") => vec![missing_entry(file, entry, kind, "")],
        Some(_) => vec![UserCodeError::WrongSignature {
            file: file.to_string(),
            entry: entry.to_string(),
            signature: kind.signature(entry),
        }],
        None => vec![UserCodeError::Compiler { file: file.to_string(), reason: format!("{reason}\n{log}") }],
    }
}

fn missing_entry(file: &str, entry: &str, kind: EntryKind, found: &str) -> UserCodeError {
    UserCodeError::MissingEntry {
        file: file.to_string(),
        entry: entry.to_string(),
        kind: match kind {
            EntryKind::Kernel => "extern \"C\" __global__ function",
            EntryKind::Handler => "__device__ function",
        },
        found: found.to_string(),
        signature: kind.signature(entry),
    }
}

/// The `.entry` names of a PTX text.
fn ptx_entries(ptx: &str) -> Vec<&str> {
    ptx.lines()
        .filter_map(|l| l.split_once(".entry ").map(|(_, rest)| rest))
        .map(|rest| rest.split(|c: char| c == '(' || c.is_whitespace()).next().unwrap_or_default())
        .collect()
}

/// Compiles `text` (named `file`, e.g. its path) for checking, without a
/// GPU: every compile error with its line, or the missing or mistyped entry.
pub fn check_source(file: &str, text: &str, entry: &str, kind: EntryKind) -> Vec<UserCodeError> {
    if !nvrtc_present() {
        return vec![UserCodeError::NoNvrtc { file: file.to_string() }];
    }
    let ptx = match nvrtc::compile_ptx(file, &with_entry_check(text, entry, kind), CHECK_ARCH) {
        Ok(ptx) => ptx,
        Err(e) => {
            let problems = compile_problems(e, file, entry, kind);
            // Without the entry the check cannot compile: name what the file defines instead.
            return match (&problems[..], kind) {
                ([UserCodeError::MissingEntry { .. }], EntryKind::Kernel) => {
                    match nvrtc::compile_ptx(file, text, CHECK_ARCH) {
                        Ok(ptx) => vec![missing_kernel(file, entry, &ptx_entries(&ptx))],
                        Err(_) => problems,
                    }
                }
                _ => problems,
            };
        }
    };
    if kind == EntryKind::Handler {
        return Vec::new();
    }
    let entries = ptx_entries(&ptx);
    if entries.contains(&entry) {
        return Vec::new();
    }
    vec![missing_kernel(file, entry, &entries)]
}

/// The missing kernel `entry`, naming the kernels `entries` of the file's PTX.
fn missing_kernel(file: &str, entry: &str, entries: &[&str]) -> UserCodeError {
    let kind = EntryKind::Kernel;
    let found = if entries.iter().any(|e| e.starts_with("_Z") && e.contains(entry)) {
        format!(" (\"{entry}\" is there without extern \"C\", so its name is mangled)")
    } else if entries.is_empty() {
        " (it defines no extern \"C\" __global__ function)".to_string()
    } else {
        format!(" (it defines {})", entries.join(", "))
    };
    missing_entry(file, entry, kind, &found)
}

/// The cubin of a user kernel for the compiler's GPU, from the on-disk
/// cubin cache when it was compiled before.
pub fn kernel_cubin(
    compiler: &Compiler,
    file: &str,
    text: &str,
    entry: &str,
) -> Result<Vec<u8>, Vec<UserCodeError>> {
    let kind = EntryKind::Kernel;
    let cubin = compiler
        .cubin(file, &with_entry_check(text, entry, kind))
        .map_err(|e| compile_problems(e, file, entry, kind))?;
    if defines_kernel(&cubin, entry) { Ok(cubin) } else { Err(vec![missing_entry(file, entry, kind, "")]) }
}

/// Name of the kernel [`entry_kernel_cubin`] wraps around a user kernel.
pub const WRAPPED_ENTRY: &str = "fl_user_entry";

/// `text` compiled as the device function of one entry kernel,
/// [`WRAPPED_ENTRY`]: the user's `__global__` functions become `__device__`
/// ones (and their `__launch_bounds__` go, the wrapper declares `threads`),
/// and the wrapper fills the frame's `fl_frame` in shared memory
/// (`kernels/user_frame.cuh`), calls `entry` with it, and has its last block
/// store that `fl_frame` and the sample count for the operators after it.
/// One kernel per frame instead of a prologue node and the user's kernel.
/// Errors name the user's file and lines as [`kernel_cubin`]'s do.
pub fn entry_kernel_cubin(
    compiler: &Compiler,
    file: &str,
    text: &str,
    entry: &str,
    threads: u32,
) -> Result<Vec<u8>, Vec<UserCodeError>> {
    let kind = EntryKind::Kernel;
    let quoted = file.replace('\\', "\\\\").replace('"', "\\\"");
    let wrapped = format!(
        "#include \"user_frame.cuh\"\n\
         #undef __global__\n#define __global__ __device__\n\
         #undef __launch_bounds__\n#define __launch_bounds__(...)\n\
         #line 1 \"{quoted}\"\n{text}\n\
         #line 1 \"{CHECK_FILE}\"\n\
         #undef __global__\n#define __global__ __attribute__((global))\n\
         #undef __launch_bounds__\n#define __launch_bounds__(...) __attribute__((launch_bounds(__VA_ARGS__)))\n\
         {CHECK}{WRAPPER}",
        CHECK = signature_check(entry, kind),
        WRAPPER = ENTRY_WRAPPER.replace("FL_ENTRY", entry).replace("FL_THREADS", &threads.to_string()),
    );
    let cubin = compiler.cubin(file, &wrapped).map_err(|e| compile_problems(e, file, entry, kind))?;
    if defines_kernel(&cubin, WRAPPED_ENTRY) {
        Ok(cubin)
    } else {
        Err(vec![missing_entry(file, entry, kind, "")])
    }
}

/// The entry kernel of [`entry_kernel_cubin`]; `FL_ENTRY` and `FL_THREADS`
/// are replaced by the user's entry and the block size. Arguments: the
/// FrameDesc, the loop state's copy of the claimed slot's header, this
/// operator's `fl_frame` in device memory (read by the chain's later user
/// kernels as `first`) and its block ticket, `first` (null for the chain's
/// first user kernel), the counts' capacities, the loop parameters when this
/// is the chain's last operator and publishes the result itself (else null),
/// then the user kernel's own arguments, and last the operator's step in the
/// frame's parameter bank: with one (and a loop with banks), the kernel
/// gets its parameter struct from there instead of `params`.
const ENTRY_WRAPPER: &str = r#"
extern "C" __global__ void __launch_bounds__(FL_THREADS)
    fl_user_entry(FrameDesc* fd, const SlotHeader* slot, fl_frame* frame_out, uint32_t* ticket,
                  const fl_frame* first, uint32_t in_capacity, uint32_t out_capacity, uint32_t fixed_out,
                  const LoopParams* publish, const float* in, float* out, const void* params,
                  fl_user_result* user, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  if (const FusedStep* live = fl_live_step(fd, param_step)) params = live->coeffs;
  __shared__ alignas(64) fl_frame frame;
  __shared__ uint32_t samples_before;  // the FrameDesc's sample count as this kernel found it
  if (threadIdx.x == 0) {
    samples_before = fd->n_samples;
    fl_user_fill_frame(&frame, fd, slot, first, in_capacity, out_capacity, fixed_out);
  }
  __syncthreads();
  FL_ENTRY(&frame, in, out, params, user);
  __syncthreads();
  if (threadIdx.x != 0) return;
  // The FrameDesc's sample count changes only when this operator's output
  // is sized differently from its input; every block reads it first, so a
  // change (and the publish, which needs every block's work) waits for the
  // last block to take a ticket. Otherwise block 0 finishes alone.
  const bool resized = frame.out_count != samples_before;
  bool finisher = blockIdx.x == 0;
  if (gridDim.x > 1 && (resized || publish != nullptr)) {
    __threadfence();
    finisher = atomicAdd(ticket, 1u) == gridDim.x - 1;
    if (finisher) {
      __threadfence();
      *ticket = 0u;
    }
  }
  if (!finisher) return;
  *frame_out = frame;
  if (resized) fd->n_samples = frame.out_count;
  if (publish != nullptr) fl_publish_result(*publish);
}
"#;

/// The text of a user source: a regular file of at most [`MAX_SOURCE_BYTES`].
pub fn read_source(path: &Path) -> Result<String, UserCodeError> {
    let file = path.display().to_string();
    let meta =
        std::fs::metadata(path).map_err(|source| UserCodeError::Read { path: file.clone(), source })?;
    if !meta.is_file() || meta.len() > MAX_SOURCE_BYTES {
        return Err(UserCodeError::NotASource { path: file, bytes: meta.len() });
    }
    std::fs::read_to_string(path).map_err(|source| UserCodeError::Read { path: file, source })
}

/// The source of user kernel `spec` and the name compiler messages give it:
/// its `code`, or the file `source` names (relative to the directory of
/// `config_file` when given, else as it stands).
pub fn kernel_text(
    spec: &crate::ops::user_kernel::UserKernelSpec,
    config_file: Option<&Path>,
) -> Result<(String, String), UserCodeError> {
    if let Some(code) = &spec.code {
        return Ok((spec.source_name(), code.clone()));
    }
    let path = config_file.map_or_else(|| spec.source.clone(), |f| spec.source_path(f));
    Ok((path.display().to_string(), read_source(&path)?))
}

/// Compiles every user kernel of `cfg`'s chain (sources relative to the
/// directory of `config_file`, the file `cfg` was loaded from) and returns
/// every problem, keyed `chain[i].source` or `chain[i].entry`.
pub fn check_user_code(cfg: &Config, config_file: &Path) -> Vec<ConfigProblem> {
    let mut problems = Vec::new();
    for (i, op) in cfg.chain.iter().enumerate() {
        let OpSpec::Kernel(k) = op else { continue };
        // A bad entry name is already a problem of the chain itself.
        // So is neither or both of source and code.
        if !is_c_identifier(&k.entry) || k.code.is_some() != k.source.as_os_str().is_empty() {
            continue;
        }
        let errors = match kernel_text(k, Some(config_file)) {
            Ok((file, text)) => check_source(&file, &text, &k.entry, EntryKind::Kernel),
            Err(e) => vec![e],
        };
        // A source given as code has its problems under chain[i].code.
        let source_key = if k.code.is_some() { "code" } else { "source" };
        problems.extend(errors.iter().map(|e| {
            let key = if e.key() == "source" { source_key } else { e.key() };
            ConfigProblem::new(format!("chain[{i}].{key}"), e.to_string())
        }));
    }
    if let Some(h) = &cfg.handler {
        problems.extend(check_handler(h, cfg.backend, config_file));
    }
    problems
}

/// The problems of a `[handler]` section, keyed `handler.source` or
/// `handler.entry`: refused on the host backend, else compiled and its
/// entry's signature checked.
fn check_handler(h: &HandlerConfig, backend: BackendChoice, config_file: &Path) -> Vec<ConfigProblem> {
    if backend == BackendChoice::Host {
        return vec![ConfigProblem::new("handler.entry", h.host_refusal())];
    }
    let path = h.source_path(config_file);
    let file = path.display().to_string();
    let errors = match read_source(&path) {
        Ok(text) => check_source(&file, &text, &h.entry, EntryKind::Handler),
        Err(e) => vec![e],
    };
    errors.iter().map(|e| ConfigProblem::new(format!("handler.{}", e.key()), e.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvrtc_errors() {
        let log = "/etc/k/b.cu(9): error: expected a \";\"\n    out[i] = x\n            ^\n\n\
                   frameloop-entry-check(2): error: identifier \"beam\" is undefined\n\
                   a(b).cu(3): catastrophic error: cannot open source file \"x.cuh\"\n\
                   2 errors detected in the compilation of \"/etc/k/b.cu\".\n";
        assert_eq!(
            parse_log(log),
            vec![
                ("/etc/k/b.cu".to_string(), 9, "expected a \";\"".to_string()),
                (CHECK_FILE.to_string(), 2, "identifier \"beam\" is undefined".to_string()),
                ("a(b).cu".to_string(), 3, "cannot open source file \"x.cuh\"".to_string()),
            ]
        );
    }

    #[test]
    fn errors_in_the_users_file_hide_the_entry_check() {
        let log = "k.cu(4): error: bad\nframeloop-entry-check(2): error: identifier \"e\" is undefined\n";
        let err = GpuError::Compile { file: "k.cu".into(), reason: "failed".into(), log: log.into() };
        let p = compile_problems(err, "k.cu", "e", EntryKind::Kernel);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].to_string(), "k.cu(4): error: bad");
        assert_eq!(p[0].key(), "source");
        let log = "frameloop-entry-check(2): error: identifier \"e\" is undefined\n";
        let err = GpuError::Compile { file: "k.cu".into(), reason: "failed".into(), log: log.into() };
        let p = compile_problems(err, "k.cu", "e", EntryKind::Kernel);
        assert_eq!(p[0].key(), "entry");
        assert!(
            p[0].to_string().starts_with("k.cu defines no extern \"C\" __global__ function \"e\""),
            "{}",
            p[0]
        );
    }

    #[test]
    fn finds_ptx_entries() {
        let ptx = ".visible .entry gain(\n\t.param .u64 a\n)\n.visible .entry _Z4beamPKf(\n.func f(";
        assert_eq!(ptx_entries(ptx), ["gain", "_Z4beamPKf"]);
    }

    #[test]
    fn a_kernel_given_as_code_is_checked_under_its_code_key_with_the_line() {
        let kernel = |body: &str| {
            let code = format!(
                "#include \"frameloop.cuh\"\nextern \"C\" __global__ void k(const fl_frame* frame, const float* in, \
                 float* out, const void* params, fl_user_result* user) {{\n{body}\n}}\n"
            );
            let text = format!(
                "backend = \"cuda\"\n[[chain]]\nop = \"unpack\"\nformat = \"u16\"\n[[chain]]\nop = \"kernel\"\nentry = \"k\"\ncode = {}\n",
                toml::Value::String(code)
            );
            let cfg = crate::config::parse(&text).unwrap();
            check_user_code(&cfg, Path::new("/nowhere/frameloop.toml"))
        };
        if !nvrtc_present() {
            eprintln!("NVRTC not present; skipping");
            return;
        }
        assert!(kernel("if (threadIdx.x < frame->out_count) out[threadIdx.x] = in[threadIdx.x];").is_empty());
        let broken = kernel("out[0] = in[0] +;");
        assert_eq!(broken.len(), 1, "{broken:?}");
        assert_eq!(broken[0].key, "chain[1].code");
        assert!(broken[0].message.starts_with("code:k(3): error:"), "{}", broken[0].message);
    }
}
