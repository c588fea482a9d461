//! The driver-level building blocks the GPU backend uses, now in the CUDA
//! layer ([`crate::cuda`]); re-exported here under their old paths.

pub use crate::cuda::device::open_context;
pub use crate::cuda::graph::{Conditional, ConditionalHandle, Graph, GraphExec, GraphRef, Node};
pub use crate::cuda::memory::DeviceBuffer;
pub use crate::cuda::module::{LaunchDims, function_name, launch_raw};
pub use crate::cuda::stream::{stream_done, stream_sync};
