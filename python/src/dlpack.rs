//! DLPack export: a 1-D `float32` tensor over memory someone else owns,
//! wrapped in a Python capsule as the DLPack specification says (capsule
//! names `"dltensor"` / `"used_dltensor"`, or the versioned
//! `"dltensor_versioned"` / `"used_dltensor_versioned"` for consumers that
//! ask for DLPack 1.x). The tensor keeps its owner (an `Arc`) alive until
//! the consumer calls the deleter, or until the capsule is collected unused.

use pyo3::ffi;
use pyo3::prelude::*;
use std::any::Any;
use std::ffi::{CStr, c_void};
use std::sync::Arc;

/// `DLDeviceType::kDLCPU`.
pub const DEVICE_CPU: i32 = 1;
/// `DLDeviceType::kDLCUDA`.
pub const DEVICE_CUDA: i32 = 2;

/// `DLDataTypeCode::kDLFloat`.
const DTYPE_FLOAT: u8 = 2;
/// `DLPACK_FLAG_BITMASK_READ_ONLY`: the consumer must not write.
const FLAG_READ_ONLY: u64 = 1 << 0;
/// `DLPACK_FLAG_BITMASK_IS_COPIED`: the tensor is a copy made for this export.
const FLAG_IS_COPIED: u64 = 1 << 1;

const LEGACY_NAME: &CStr = c"dltensor";
const VERSIONED_NAME: &CStr = c"dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    /// Null: compact row-major.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// One exported tensor and what it needs: the managed struct first (a
/// pointer to it is a pointer to this), the shape it points to, the owner.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: [i64; 1],
    _owner: Arc<dyn Any + Send + Sync>,
}

/// What to export: `len` `f32` at `data` on `device` (`(type, id)`), kept
/// valid by `owner`.
pub struct TensorSpec {
    pub data: u64,
    pub len: usize,
    pub device: (i32, i32),
    pub owner: Arc<dyn Any + Send + Sync>,
    /// The samples are the appliance's (a ring slot): consumers must not write.
    pub read_only: bool,
    /// The samples were copied for this export.
    pub copied: bool,
}

impl TensorSpec {
    fn tensor(&self) -> DLTensor {
        DLTensor {
            data: self.data as *mut c_void,
            device: DLDevice { device_type: self.device.0, device_id: self.device.1 },
            ndim: 1,
            dtype: DLDataType { code: DTYPE_FLOAT, bits: 32, lanes: 1 },
            shape: std::ptr::null_mut(),
            strides: std::ptr::null_mut(),
            byte_offset: 0,
        }
    }

    /// A capsule named `"dltensor"` over a `DLManagedTensor` (DLPack 0.x).
    pub fn into_legacy_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let managed = DLManagedTensor {
            dl_tensor: self.tensor(),
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_legacy),
        };
        let export =
            Box::into_raw(Box::new(Export { managed, shape: [self.len as i64], _owner: self.owner }));
        // SAFETY: `export` is the live allocation just made; its shape field
        // moves no more (it is on the heap until the deleter frees it).
        unsafe {
            (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
            (*export).managed.manager_ctx = export.cast();
        }
        // SAFETY: the pointer is the managed tensor (first field of a repr(C)
        // struct); the destructor frees it only while the capsule is unused.
        unsafe { capsule(py, export.cast(), LEGACY_NAME, destroy_legacy_capsule) }.inspect_err(|_| {
            // SAFETY: no capsule took the allocation; it is freed once, here.
            unsafe { delete_legacy(export.cast()) }
        })
    }

    /// A capsule named `"dltensor_versioned"` over a
    /// `DLManagedTensorVersioned` (DLPack 1.0, with the read-only and
    /// copied flags).
    pub fn into_versioned_capsule(self, py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
        let flags =
            if self.read_only { FLAG_READ_ONLY } else { 0 } | if self.copied { FLAG_IS_COPIED } else { 0 };
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 0 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_versioned),
            flags,
            dl_tensor: self.tensor(),
        };
        let export =
            Box::into_raw(Box::new(Export { managed, shape: [self.len as i64], _owner: self.owner }));
        // SAFETY: as in `into_legacy_capsule`.
        unsafe {
            (*export).managed.dl_tensor.shape = (*export).shape.as_mut_ptr();
            (*export).managed.manager_ctx = export.cast();
        }
        // SAFETY: as in `into_legacy_capsule`.
        unsafe { capsule(py, export.cast(), VERSIONED_NAME, destroy_versioned_capsule) }.inspect_err(|_| {
            // SAFETY: no capsule took the allocation; it is freed once, here.
            unsafe { delete_versioned(export.cast()) }
        })
    }
}

/// Wraps `pointer` in a capsule named `name` (a static string: the capsule
/// keeps the pointer, not a copy).
///
/// # Safety
/// `destructor` must accept a capsule of this name over this pointer.
unsafe fn capsule<'py>(
    py: Python<'py>,
    pointer: *mut c_void,
    name: &'static CStr,
    destructor: unsafe extern "C" fn(*mut ffi::PyObject),
) -> PyResult<Bound<'py, PyAny>> {
    // SAFETY: the GIL is held (`py`); `pointer` is non-null; `name` is static.
    unsafe {
        let raw = ffi::PyCapsule_New(pointer, name.as_ptr(), Some(destructor));
        Bound::from_owned_ptr_or_err(py, raw)
    }
}

/// The `DLManagedTensor` deleter: frees the export and drops its owner.
unsafe extern "C" fn delete_legacy(managed: *mut DLManagedTensor) {
    if !managed.is_null() {
        // SAFETY: `managed` is the first field of an `Export` boxed by
        // `into_legacy_capsule`; DLPack calls the deleter once.
        drop(unsafe { Box::from_raw(managed.cast::<Export<DLManagedTensor>>()) });
    }
}

/// The `DLManagedTensorVersioned` deleter.
unsafe extern "C" fn delete_versioned(managed: *mut DLManagedTensorVersioned) {
    if !managed.is_null() {
        // SAFETY: as in `delete_legacy`, boxed by `into_versioned_capsule`.
        drop(unsafe { Box::from_raw(managed.cast::<Export<DLManagedTensorVersioned>>()) });
    }
}

/// Capsule destructor: a capsule still named `"dltensor"` was never
/// consumed, so the tensor is deleted here; a consumer renames it
/// `"used_dltensor"` and calls the deleter itself.
unsafe extern "C" fn destroy_legacy_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: CPython calls this with the capsule, holding the GIL;
    // `PyCapsule_IsValid` sets no error.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, LEGACY_NAME.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, LEGACY_NAME.as_ptr()).cast::<DLManagedTensor>();
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

/// Capsule destructor of the versioned capsule (see `destroy_legacy_capsule`).
unsafe extern "C" fn destroy_versioned_capsule(capsule: *mut ffi::PyObject) {
    // SAFETY: as in `destroy_legacy_capsule`.
    unsafe {
        if ffi::PyCapsule_IsValid(capsule, VERSIONED_NAME.as_ptr()) == 1 {
            let managed = ffi::PyCapsule_GetPointer(capsule, VERSIONED_NAME.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if let Some(deleter) = (*managed).deleter {
                deleter(managed);
            }
        }
    }
}

const _: () = {
    // The DLPack ABI on 64-bit targets.
    assert!(std::mem::size_of::<DLTensor>() == 48);
    assert!(std::mem::size_of::<DLManagedTensor>() == 64);
    assert!(std::mem::size_of::<DLManagedTensorVersioned>() == 80);
    assert!(std::mem::offset_of!(DLManagedTensorVersioned, dl_tensor) == 32);
};
