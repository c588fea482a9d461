//! The CUDA layer: the only place that calls the CUDA driver, NVRTC and
//! cuFFT directly (`cudarc`'s `sys` bindings). Everything above it (the GPU
//! backend in `gpu/`, the device-memory output ring in `output/`, the
//! GPUDirect ring in `rdma/`) uses these checked functions and owning types,
//! and uses cudarc's own safe types (`CudaContext`, `CudaStream`,
//! `CudaFunction`) for what they cover.
//!
//! Layered as cudarc is (sys → result → safe): [`error`] turns every status
//! into a [`CudaError`] that keeps the code (`CUresult`, `nvrtcResult`,
//! `cufftResult`) as its source; each subsystem module holds thin checked
//! wrappers and, on top of them, RAII owners that free what they own on drop
//! and never panic there (a failure is logged, and memory leaks rather than
//! being freed twice).
//!
//! | module | what it holds |
//! |---|---|
//! | [`error`] | [`CudaError`], `check` of a driver status |
//! | [`device`] | library presence, [`probe`], device attributes, the shared primary context ([`open_context`]) |
//! | [`memory`] | memory kinds: [`DeviceBuffer`] (`cuMemAlloc`), [`PinnedHost`] (mapped `cuMemHostAlloc`), [`HostRegistration`] (`cuMemHostRegister`) |
//! | [`copy`] | synchronous and stream-ordered host/device copies |
//! | [`copy_stream`] | [`CopyStream`]: bounded copies into one device allocation on a non-blocking stream of its own, never synchronising the device |
//! | [`stream`] | [`OwnedStream`] (non-blocking), stream queries and waits |
//! | [`module`] | [`LaunchDims`], raw-parameter kernel launches, function names |
//! | [`graph`] | [`Graph`] with conditional WHILE/IF nodes, kernel nodes, capture, programmatic edges, [`GraphExec`] |
//! | [`ipc`] | CUDA IPC handles of device memory and their mappings in another process |
//! | [`dmabuf`] | dma-buf export of device memory for a NIC (through [`DeviceBuffer::export_dmabuf`]) |
//! | [`nvrtc`] | NVRTC's version and an owned [`nvrtc::Program`] |
//! | [`fft`] | cuFFT presence and a batched R2C [`CufftPlan`] |

pub mod copy;
pub mod copy_stream;
pub mod device;
pub mod dmabuf;
pub mod error;
pub mod fft;
pub mod graph;
pub mod ipc;
pub mod memory;
pub mod module;
pub mod nvrtc;
pub mod stream;

pub use copy_stream::{CopyStream, STAGING_BYTES};
pub use device::{GpuInfo, GpuUnavailable, driver_present, nvrtc_present, open_context, probe};
pub use error::{CudaError, check};
pub use fft::{CufftPlan, cufft_present};
pub use graph::{Conditional, ConditionalHandle, Graph, GraphExec, GraphRef, Node};
pub use memory::{DeviceBuffer, HostRegistration, PinnedHost};
pub use module::{LaunchDims, function_name, launch_raw};
pub use stream::{OwnedStream, stream_done, stream_sync};
