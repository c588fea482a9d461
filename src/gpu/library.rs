//! The kernel library: every embedded CUDA source compiled for the device and
//! loaded as a module, handing out kernels by name.

use super::nvrtc::{CacheDir, Compiler};
use super::{GpuError, sources};
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::Arc;

/// All loaded modules of one context and their kernels by name.
pub struct KernelLibrary {
    /// Kept so the modules stay loaded while functions are handed out.
    modules: Vec<(String, Arc<CudaModule>)>,
    functions: HashMap<String, CudaFunction>,
    arch: String,
}

/// The kernels of an embedded source: as listed by `kernel_sources` for the
/// operator kernels, found by [`kernel_names`] for the loop's own sources.
fn kernels_of(file: &str, source: &str) -> Vec<String> {
    match super::kernel_sources::KERNEL_NAMES.iter().find(|(f, _)| *f == file) {
        Some((_, names)) => names.iter().map(|n| n.to_string()).collect(),
        None => kernel_names(source),
    }
}

/// Names of the `__global__` functions defined in a CUDA source (the
/// identifier before the parameter list of each `__global__` declaration).
pub fn kernel_names(source: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("__global__") {
        rest = &rest[at + "__global__".len()..];
        let Some(mut paren) = rest.find('(') else { break };
        // Skip `__launch_bounds__(...)` between `__global__` and the name.
        while rest[..paren].trim_end().ends_with("__launch_bounds__") {
            let Some(close) = rest[paren..].find(')') else { return names };
            let Some(next) = rest[paren + close..].find('(') else { return names };
            paren += close + next;
        }
        let head = rest[..paren].trim_end();
        let start = head.rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |i| i + 1);
        let name = &head[start..];
        if !name.is_empty() && !names.iter().any(|n| n == name) {
            names.push(name.to_string());
        }
    }
    names
}

impl KernelLibrary {
    /// Compiles (or loads from the cache) and loads every embedded source.
    pub fn load(ctx: &Arc<CudaContext>, cache: CacheDir) -> Result<Self, GpuError> {
        let (major, minor) = ctx.compute_capability()?;
        let compiler = Compiler::new(&format!("sm_{major}{minor}"), cache)?;
        let mut modules = Vec::new();
        let mut functions = HashMap::new();
        for (file, source) in sources::all_sources() {
            let cubin = compiler.cubin(file, source)?;
            let module = ctx.load_module(Ptx::from_binary(cubin))?;
            for name in kernels_of(file, source) {
                let f = module.load_function(&name).map_err(|_| {
                    GpuError::MissingKernel(format!("{name} (declared in {file}; is it extern \"C\"?)"))
                })?;
                if functions.insert(name.clone(), f).is_some() {
                    return Err(GpuError::Setup(format!(
                        "kernel {name} is defined in two sources; rename one"
                    )));
                }
            }
            modules.push((file.to_string(), module));
        }
        Ok(Self { modules, functions, arch: compiler.arch().to_string() })
    }

    /// The architecture the kernels were built for (e.g. `sm_90`).
    pub fn arch(&self) -> &str {
        &self.arch
    }

    /// Names of the loaded source files.
    pub fn files(&self) -> impl Iterator<Item = &str> {
        self.modules.iter().map(|(f, _)| f.as_str())
    }

    /// The `extern "C"` kernel called `name`, from whichever module defines it.
    pub fn function(&self, name: &str) -> Result<&CudaFunction, GpuError> {
        self.functions.get(name).ok_or_else(|| GpuError::MissingKernel(name.to_string()))
    }
}

impl crate::fragment::KernelLookup for KernelLibrary {
    fn function(&self, name: &str) -> Option<&CudaFunction> {
        self.functions.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::kernel_names;

    #[test]
    fn finds_kernel_names() {
        let src = "extern \"C\" __global__ void fl_a(int x) {}\n__global__ void\nfl_b (float* y);\n\
                   extern \"C\" __global__ void __launch_bounds__(256, 1) fl_c(int z) {}";
        assert_eq!(kernel_names(src), vec!["fl_a".to_string(), "fl_b".to_string(), "fl_c".to_string()]);
    }
}
