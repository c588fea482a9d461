//! NVRTC compilation of the embedded CUDA sources to a cubin for one GPU
//! architecture, with an on-disk cache keyed by source hash, architecture and
//! NVRTC version. A cache that cannot be read or written only warns.

use super::GpuError;
use super::sources::all_headers;
use crate::cuda::nvrtc::Program;
pub use crate::cuda::nvrtc::version;
use std::ffi::CString;
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
        let version = version().map_err(|e| GpuError::Compile {
            file: "-".into(),
            reason: e.to_string(),
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
    let headers: Vec<(CString, CString)> =
        all_headers().map(|(n, t)| Ok((c(n)?, c(t)?))).collect::<Result<_, GpuError>>()?;
    let prog = Program::new(&src, &name, &headers).map_err(|e| err(e.to_string(), String::new()))?;
    let mut options: Vec<CString> = BASE_OPTIONS.iter().map(|o| c(o)).collect::<Result<_, _>>()?;
    options.push(c(&format!("--gpu-architecture={arch}"))?);
    let defines = extra_defines();
    for d in &defines {
        options.push(c(d)?);
    }
    let compiled = prog.compile(&options);
    let log = prog.log();
    compiled.map_err(|e| err(e.to_string(), log.clone()))?;
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
    let out = match output {
        Output::Ptx => prog.ptx(),
        Output::Cubin => prog.cubin(),
    };
    out.map_err(|e| err(e.to_string(), log))
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
