//! NVRTC compilation of the embedded CUDA sources to a cubin for one GPU
//! architecture, with an on-disk cache keyed by source hash, architecture and
//! NVRTC version. A cache that cannot be read or written only warns.

use super::GpuError;
use super::sources::all_headers;
use cudarc::nvrtc::sys;
use std::ffi::{CStr, CString, c_char};
use std::path::{Path, PathBuf};

/// NVRTC options every source is compiled with (besides the architecture).
const BASE_OPTIONS: &[&str] = &["-std=c++17", "--device-as-default-execution-space", "-lineinfo"];

/// Environment variable of extra preprocessor definitions for every kernel,
/// for kernel development: whitespace-separated `NAME` or `NAME=VALUE`, each
/// passed as `-D`. `FL_TILED_PHASES` makes the claiming tiled kernel write
/// its phase times into the frame's user result words (`bench --compare`
/// reports them; docs/gpu.md).
pub const DEFINES_ENV: &str = "FRAMELOOP_NVRTC_DEFINES";

/// The `-D` options [`DEFINES_ENV`] asks for, in order.
fn extra_defines() -> Vec<String> {
    std::env::var(DEFINES_ENV).map(|list| define_options(&list)).unwrap_or_default()
}

/// `-D` options of a whitespace-separated list of definitions.
fn define_options(list: &str) -> Vec<String> {
    list.split_whitespace().map(|d| format!("-D{d}")).collect()
}

/// The names among `-D` options `defines` that NVRTC's `log` says the
/// source defines again with another value. NVRTC only warns, and the
/// source's own value is the one compiled, so such a definition would
/// silently change nothing.
fn redefined_names(log: &str, defines: &[String]) -> Vec<String> {
    defines
        .iter()
        .filter_map(|d| {
            let name = d.strip_prefix("-D")?.split('=').next()?;
            log.contains(&format!("incompatible redefinition of macro \"{name}\"")).then(|| name.to_string())
        })
        .collect()
}

/// An NVRTC call that failed, with the code it returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{call}: {}", nvrtc_error_text(*.result))]
pub struct NvrtcCallError {
    /// The NVRTC function that failed.
    pub call: &'static str,
    /// What it returned.
    pub result: sys::nvrtcResult,
}

/// NVRTC's text for `r`.
fn nvrtc_error_text(r: sys::nvrtcResult) -> String {
    // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string.
    unsafe { CStr::from_ptr(sys::nvrtcGetErrorString(r)) }.to_string_lossy().into_owned()
}

fn nvrtc_check(call: &'static str, result: sys::nvrtcResult) -> Result<(), NvrtcCallError> {
    if result == sys::nvrtcResult::NVRTC_SUCCESS {
        return Ok(());
    }
    Err(NvrtcCallError { call, result })
}

/// NVRTC's (major, minor) version. Callers must have checked `nvrtc_present()`.
pub fn version() -> Result<(i32, i32), NvrtcCallError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers; the library is present (caller's contract).
    nvrtc_check("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// Where compiled cubins are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheDir {
    /// `$XDG_CACHE_HOME/frameloop`, else `~/.cache/frameloop`, else
    /// `/var/cache/frameloop` when writable.
    Default,
    At(PathBuf),
    Disabled,
}

impl CacheDir {
    fn resolve(&self) -> Option<PathBuf> {
        match self {
            CacheDir::Disabled => None,
            CacheDir::At(p) => Some(p.clone()),
            CacheDir::Default => {
                if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|x| !x.is_empty()) {
                    return Some(PathBuf::from(x).join("frameloop"));
                }
                if let Some(h) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
                    return Some(PathBuf::from(h).join(".cache").join("frameloop"));
                }
                let var = PathBuf::from("/var/cache/frameloop");
                (std::fs::create_dir_all(&var).is_ok()).then_some(var)
            }
        }
    }
}

/// FNV-1a over `parts` with a separator, twice with different offsets (128 bits).
fn stable_hash(parts: &[&[u8]]) -> String {
    let mut out = String::new();
    for basis in [0xcbf2_9ce4_8422_2325u64, 0x8422_2325_cbf2_9ce4u64] {
        let mut h = basis;
        for p in parts {
            for &b in p.iter().chain(&(p.len() as u64).to_le_bytes()) {
                h ^= b as u64;
                h = h.wrapping_mul(0x0000_0100_0000_01b3);
            }
        }
        out.push_str(&format!("{h:016x}"));
    }
    out
}

/// Compiles sources for one architecture, caching the cubins.
pub struct Compiler {
    arch: String,
    version: (i32, i32),
    cache: Option<PathBuf>,
}

impl Compiler {
    /// A compiler for `arch` (e.g. `sm_90`). Checks that NVRTC is loadable first.
    pub fn new(arch: &str, cache: CacheDir) -> Result<Self, GpuError> {
        if !super::nvrtc_present() {
            return Err(GpuError::Unavailable(super::GpuUnavailable(
                "NVRTC (libnvrtc.so.13) is not on the loader path".into(),
            )));
        }
        let version = version().map_err(|reason| GpuError::Compile {
            file: "-".into(),
            reason: reason.to_string(),
            log: String::new(),
        })?;
        Ok(Self { arch: arch.to_string(), version, cache: cache.resolve() })
    }

    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// The cache file a source would be stored in.
    pub fn cache_path(&self, file: &str, source: &str) -> Option<PathBuf> {
        let version = format!("{}.{}", self.version.0, self.version.1);
        let mut parts: Vec<&[u8]> = vec![source.as_bytes(), self.arch.as_bytes(), version.as_bytes()];
        for (name, text) in all_headers() {
            parts.push(name.as_bytes());
            parts.push(text.as_bytes());
        }
        for o in BASE_OPTIONS {
            parts.push(o.as_bytes());
        }
        let defines = extra_defines();
        for d in &defines {
            parts.push(d.as_bytes());
        }
        let stem =
            file.trim_end_matches(".cu").replace(|c: char| !c.is_ascii_alphanumeric() && c != '_', "_");
        self.cache.as_ref().map(|d| d.join(format!("{stem}-{}-{}.cubin", self.arch, stable_hash(&parts))))
    }

    /// The cubin of `source` (named `file` in diagnostics), from the cache when present.
    pub fn cubin(&self, file: &str, source: &str) -> Result<Vec<u8>, GpuError> {
        let path = self.cache_path(file, source);
        if let Some(p) = &path
            && let Ok(bytes) = std::fs::read(p)
        {
            if bytes.len() >= 4 && bytes[..4] == *b"\x7fELF" {
                return Ok(bytes);
            }
            tracing::warn!("ignoring corrupt cubin cache entry {}", p.display());
        }
        let cubin = compile(file, source, &self.arch)?;
        if let Some(p) = &path
            && let Err(e) = store(p, &cubin)
        {
            tracing::warn!("cannot write the cubin cache {}: {e}; compiling at every start", p.display());
        }
        Ok(cubin)
    }
}

fn store(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("cubin"),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// Owns an NVRTC program; destroyed on drop.
struct Program(sys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let r = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            tracing::warn!("nvrtcDestroyProgram failed: {r:?}");
        }
    }
}

/// Compiles one source to a cubin for `arch` (e.g. `sm_90`; no cache). Works without a GPU.
pub fn compile(file: &str, source: &str, arch: &str) -> Result<Vec<u8>, GpuError> {
    compile_to(file, source, arch, Output::Cubin)
}

/// Compiles one source to PTX text for a virtual architecture (e.g. `compute_90`).
pub fn compile_ptx(file: &str, source: &str, arch: &str) -> Result<String, GpuError> {
    let ptx = compile_to(file, source, arch, Output::Ptx)?;
    Ok(String::from_utf8_lossy(&ptx).trim_end_matches('\0').to_string())
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Cubin,
    Ptx,
}

fn compile_to(file: &str, source: &str, arch: &str, output: Output) -> Result<Vec<u8>, GpuError> {
    let err = |reason: String, log: String| GpuError::Compile { file: file.to_string(), reason, log };
    let c = |s: &str| CString::new(s).map_err(|_| err(format!("{s:?} contains a NUL byte"), String::new()));
    let src = c(source)?;
    let name = c(file)?;
    let header_texts: Vec<CString> = all_headers().map(|(_, t)| c(t)).collect::<Result<_, _>>()?;
    let header_names: Vec<CString> = all_headers().map(|(n, _)| c(n)).collect::<Result<_, _>>()?;
    let text_ptrs: Vec<*const c_char> = header_texts.iter().map(|s| s.as_ptr()).collect();
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|s| s.as_ptr()).collect();
    let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: all strings are NUL-terminated and outlive the call; both header
    // arrays have header_texts.len() entries.
    nvrtc_check("nvrtcCreateProgram", unsafe {
        sys::nvrtcCreateProgram(
            &mut prog,
            src.as_ptr(),
            name.as_ptr(),
            header_texts.len() as i32,
            text_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    })
    .map_err(|r| err(r.to_string(), String::new()))?;
    let prog = Program(prog);
    let mut options: Vec<CString> = BASE_OPTIONS.iter().map(|o| c(o)).collect::<Result<_, _>>()?;
    options.push(c(&format!("--gpu-architecture={arch}"))?);
    let defines = extra_defines();
    for d in &defines {
        options.push(c(d)?);
    }
    let option_ptrs: Vec<*const c_char> = options.iter().map(|s| s.as_ptr()).collect();
    // SAFETY: live program; options are NUL-terminated strings that outlive the call.
    let compiled =
        unsafe { sys::nvrtcCompileProgram(prog.0, option_ptrs.len() as i32, option_ptrs.as_ptr()) };
    let log = program_log(&prog);
    nvrtc_check("nvrtcCompileProgram", compiled).map_err(|r| err(r.to_string(), log.clone()))?;
    let redefined = redefined_names(&log, &defines);
    if !redefined.is_empty() {
        return Err(err(
            format!(
                "{DEFINES_ENV} sets {}, which the source defines itself, so the setting would change nothing; \
                 set only the names the kernels leave open with #ifndef, or remove them from {DEFINES_ENV}",
                redefined.join(", ")
            ),
            log,
        ));
    }
    if !log.trim().is_empty() {
        tracing::debug!("NVRTC log for {file}: {log}");
    }
    let mut size = 0usize;
    let mut out;
    if output == Output::Ptx {
        // SAFETY: compiled program; valid out-pointer.
        nvrtc_check("nvrtcGetPTXSize", unsafe { sys::nvrtcGetPTXSize(prog.0, &mut size) })
            .map_err(|r| err(r.to_string(), log.clone()))?;
        out = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes as reported above.
        nvrtc_check("nvrtcGetPTX", unsafe { sys::nvrtcGetPTX(prog.0, out.as_mut_ptr().cast()) })
            .map_err(|r| err(r.to_string(), log))?;
    } else {
        // SAFETY: compiled program; valid out-pointer.
        nvrtc_check("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(prog.0, &mut size) })
            .map_err(|r| err(r.to_string(), log.clone()))?;
        out = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes as reported above.
        nvrtc_check("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(prog.0, out.as_mut_ptr().cast()) })
            .map_err(|r| err(r.to_string(), log))?;
    }
    Ok(out)
}

fn program_log(prog: &Program) -> String {
    let mut size = 0usize;
    // SAFETY: live program; valid out-pointer.
    if unsafe { sys::nvrtcGetProgramLogSize(prog.0, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS
        || size == 0
    {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    // SAFETY: the buffer holds `size` bytes.
    if unsafe { sys::nvrtcGetProgramLog(prog.0, buf.as_mut_ptr().cast()) } != sys::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_listed_definition_becomes_one_define_option() {
        assert_eq!(define_options(" FL_TILED_PHASES  N=3\tM "), ["-DFL_TILED_PHASES", "-DN=3", "-DM"]);
        assert!(define_options("  ").is_empty());
    }

    #[test]
    fn a_definition_the_source_overrides_is_named() {
        // NVRTC 13's warning for `-DFL_TILED_REDUCE_SAMPLES_PER_THREAD=8`
        // against an unguarded `#define` of another value.
        let log = "fused_tiled.cu(254): warning #47-D: incompatible redefinition of macro \
                   \"FL_TILED_REDUCE_SAMPLES_PER_THREAD\"\n  #define FL_TILED_REDUCE_SAMPLES_PER_THREAD 16u\n";
        let defines =
            define_options("FL_TILED_PHASES FL_TILED_REDUCE_SAMPLES_PER_THREAD=8 FL_TILED_REDUCE=1");
        assert_eq!(redefined_names(log, &defines), ["FL_TILED_REDUCE_SAMPLES_PER_THREAD"]);
        assert!(redefined_names("", &defines).is_empty());
        assert!(redefined_names(log, &[]).is_empty());
    }

    #[test]
    fn hash_depends_on_every_part_and_is_stable() {
        let a = stable_hash(&[b"abc", b"sm_90"]);
        assert_eq!(a, stable_hash(&[b"abc", b"sm_90"]));
        assert_ne!(a, stable_hash(&[b"abc", b"sm_80"]));
        assert_ne!(stable_hash(&[b"ab", b"c"]), stable_hash(&[b"a", b"bc"]));
        assert_eq!(a.len(), 32);
    }
}
