//! NVRTC: its version and an owned program ([`Program`]) that is created
//! from a source and its headers, compiled with options, and asked for its
//! log, PTX or cubin. Caching and the choice of options live above, in
//! `gpu::nvrtc`.

use super::error::{CudaError, check_nvrtc};
use cudarc::nvrtc::sys;
use std::ffi::{CStr, CString, c_char};

/// NVRTC's (major, minor) version. Callers must have checked
/// [`nvrtc_present`](super::device::nvrtc_present).
pub fn version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: valid out-pointers; the library is present (caller's contract).
    check_nvrtc("nvrtcVersion", unsafe { sys::nvrtcVersion(&mut major, &mut minor) })?;
    Ok((major, minor))
}

/// Owns an NVRTC program; destroyed on drop.
pub struct Program(sys::nvrtcProgram);

impl Program {
    /// A program of `source` named `name`, with the headers it may include
    /// as `(name, text)` pairs. NVRTC must be present.
    pub fn new(source: &CStr, name: &CStr, headers: &[(CString, CString)]) -> Result<Self, CudaError> {
        let text_ptrs: Vec<*const c_char> = headers.iter().map(|(_, t)| t.as_ptr()).collect();
        let name_ptrs: Vec<*const c_char> = headers.iter().map(|(n, _)| n.as_ptr()).collect();
        let mut prog: sys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: all strings are NUL-terminated and outlive the call; both
        // header arrays have headers.len() entries.
        check_nvrtc("nvrtcCreateProgram", unsafe {
            sys::nvrtcCreateProgram(
                &mut prog,
                source.as_ptr(),
                name.as_ptr(),
                headers.len() as i32,
                text_ptrs.as_ptr(),
                name_ptrs.as_ptr(),
            )
        })?;
        Ok(Self(prog))
    }

    /// Compiles the program with `options`; the log says why it failed.
    pub fn compile(&self, options: &[CString]) -> Result<(), CudaError> {
        let option_ptrs: Vec<*const c_char> = options.iter().map(|s| s.as_ptr()).collect();
        // SAFETY: live program; options are NUL-terminated strings that outlive the call.
        check_nvrtc("nvrtcCompileProgram", unsafe {
            sys::nvrtcCompileProgram(self.0, option_ptrs.len() as i32, option_ptrs.as_ptr())
        })
    }

    /// The compilation log, empty when NVRTC cannot give it.
    pub fn log(&self) -> String {
        let mut size = 0usize;
        // SAFETY: live program; valid out-pointer.
        if unsafe { sys::nvrtcGetProgramLogSize(self.0, &mut size) } != sys::nvrtcResult::NVRTC_SUCCESS
            || size == 0
        {
            return String::new();
        }
        let mut buf = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes.
        if unsafe { sys::nvrtcGetProgramLog(self.0, buf.as_mut_ptr().cast()) }
            != sys::nvrtcResult::NVRTC_SUCCESS
        {
            return String::new();
        }
        String::from_utf8_lossy(&buf).trim_end_matches('\0').to_string()
    }

    /// The PTX of the compiled program (NUL-terminated text).
    pub fn ptx(&self) -> Result<Vec<u8>, CudaError> {
        let mut size = 0usize;
        // SAFETY: live program; valid out-pointer.
        check_nvrtc("nvrtcGetPTXSize", unsafe { sys::nvrtcGetPTXSize(self.0, &mut size) })?;
        let mut out = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes as reported above.
        check_nvrtc("nvrtcGetPTX", unsafe { sys::nvrtcGetPTX(self.0, out.as_mut_ptr().cast()) })?;
        Ok(out)
    }

    /// The cubin of the compiled program.
    pub fn cubin(&self) -> Result<Vec<u8>, CudaError> {
        let mut size = 0usize;
        // SAFETY: live program; valid out-pointer.
        check_nvrtc("nvrtcGetCUBINSize", unsafe { sys::nvrtcGetCUBINSize(self.0, &mut size) })?;
        let mut out = vec![0u8; size];
        // SAFETY: the buffer holds `size` bytes as reported above.
        check_nvrtc("nvrtcGetCUBIN", unsafe { sys::nvrtcGetCUBIN(self.0, out.as_mut_ptr().cast()) })?;
        Ok(out)
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: created by nvrtcCreateProgram, destroyed once.
        let r = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
        if r != sys::nvrtcResult::NVRTC_SUCCESS {
            tracing::warn!("nvrtcDestroyProgram failed: {r:?}");
        }
    }
}
