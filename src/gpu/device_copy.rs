//! Host <-> GPU copies that never synchronise the device: the CUDA layer's
//! [`CopyStream`](crate::cuda::CopyStream), named here for the GPU rings
//! that use it.

pub use crate::cuda::copy_stream::{CopyStream, STAGING_BYTES};
