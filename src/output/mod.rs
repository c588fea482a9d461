//! The output ring and its consumers: each processed frame's final samples,
//! result record and user result words, published into shared memory that
//! processes on the same box attach to over a Unix socket and read without
//! a copy (see docs/outputs.md).

#[doc(hidden)]
pub mod command;
pub mod config;
pub mod consumer;
#[doc(hidden)]
pub mod cuda;
#[doc(hidden)]
pub mod handshake;
#[doc(hidden)]
pub mod layout;
#[doc(hidden)]
pub mod memory;
#[doc(hidden)]
pub mod ring;
#[doc(hidden)]
pub mod server;

pub use command::{ConsumeArgs, consume};
pub use config::OutputConfig;
pub use consumer::{Consumer, DeviceSamples, OutputFrame, SlotSamples};
pub use cuda::DeviceOutputMemory;
pub use handshake::HelloError;
pub use layout::{MemoryKind, OUTPUT_LAYOUT_VERSION, OutputGeometry};
pub use memory::{OutputMemory, SharedHostMemory, SharedRegion};
pub use ring::{DeviceOutputRing, NewestOutput, OutputRing, OutputWriter, SlotReader};
pub use server::{ConsumerLag, OutputServer, OutputSnapshot};

use crate::ops::OpSpec;
use std::path::PathBuf;
use thiserror::Error;

/// Errors of the output ring, its server and its consumers.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum OutputError {
    /// The ring cannot have that shape; set `output.slots` to 1..=1024 and
    /// check the chain's frame size.
    #[error(
        "an output ring of {slots} slots of {sample_capacity} samples is impossible; set output.slots to 1..=1024 and check the chain's frame size"
    )]
    BadGeometry {
        /// Slots asked for.
        slots: usize,
        /// Samples per slot asked for.
        sample_capacity: usize,
    },
    /// The data memory given is smaller than the ring needs (a bug of the
    /// caller: allocate the ring's `data_bytes`).
    #[error("the output ring needs {needed} bytes of data memory but got {available}")]
    TooSmall {
        /// Bytes the ring needs.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
    #[error("cannot {what} for the output ring: {source}; check the memlock and open-file limits")]
    /// Shared memory for the ring could not be created or mapped; check the
    /// memlock and open-file limits.
    Memory {
        /// The step that failed.
        what: &'static str,
        /// Its OS error.
        #[source]
        source: std::io::Error,
    },
    /// The ring has one writer and it is taken; give each ring one producer.
    #[error("the output ring's writer is already taken; give each output ring one producer")]
    WriterTaken,
    /// The host tried to publish into a ring in GPU memory, which only the
    /// GPU writes.
    #[error("the output ring lives in device memory; the host cannot publish into it (the GPU does)")]
    DeviceOnly,
    #[error(
        "cannot listen on the output socket {path}: {source}; check output.socket and that its directory exists and is writable"
    )]
    /// The appliance cannot listen on `output.socket`; check that its
    /// directory exists and is writable.
    Listen {
        /// The socket's path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    #[error(
        "cannot connect to the output socket {path}: {source}; is the appliance running with [output] enabled = true, and is --socket its output.socket?"
    )]
    /// A consumer cannot reach the appliance: run it with `[output]
    /// enabled = true` and give the consumer its `output.socket`.
    Connect {
        /// The socket's path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The attach exchange broke off or its descriptors did not match;
    /// the message says which. Attach again; if it persists, use a consumer
    /// of the appliance's release.
    #[error("attaching to the output socket failed: {0}")]
    Handshake(String),
    /// The appliance's hello could not be decoded; see [`handshake::HelloError`].
    #[error("attaching to the output socket failed: {0}")]
    Hello(#[from] handshake::HelloError),
    /// The appliance refused the consumer (all consumer lines taken, another
    /// layout version); the reason says what to do.
    #[error("the appliance refused this consumer: {0}")]
    Refused(String),
    /// A CUDA call for a ring in device memory failed; check GPU memory, and
    /// run the consumer on the appliance's machine with its GPU visible. The
    /// source keeps the driver's status (`CudaError::Driver`).
    #[error(
        "the output ring is in CUDA device memory and a CUDA call for it failed: {0}; the appliance \
         allocates and exports it (check GPU memory and the device), a consumer opens it (run it on the \
         same machine, as another process, with the appliance's GPU visible)"
    )]
    Cuda(#[source] crate::cuda::CudaError),
    /// A host copy of an output was asked of a consumer that reads the
    /// device ring of an appliance in its own process.
    #[error(
        "this consumer reads the device ring of an appliance in its own process; copy the samples on \
         the device (device_samples())"
    )]
    LocalDeviceCopy,
    /// Copying the newest output out of a ring in device memory failed (a
    /// previewer's copy; the loop and the consumers are not affected).
    #[error(
        "copying the newest output from the device ring failed: {0}; check the GPU (the log above has its error)"
    )]
    NewestCopy(#[source] crate::ring::memory::CopyError),
}

/// An output ring's writer and its attach server, started together.
pub struct ServedOutputs {
    /// Give it to the resident loop (`HostLoop::write_outputs`, `CudaLoop::with_output`).
    pub writer: OutputWriter,
    /// Keep it while the appliance runs; `snapshot()` feeds the metrics.
    pub server: OutputServer,
}

/// Creates the output ring in shared host memory for `chain` on frames of
/// at most `max_frame_bytes` bytes and serves it on `config.socket`;
/// `None` when `config.enabled` is off.
pub fn serve_host_outputs(
    config: &OutputConfig,
    chain: &[OpSpec],
    max_frame_bytes: usize,
) -> Result<Option<ServedOutputs>, OutputError> {
    if !config.enabled {
        return Ok(None);
    }
    let ring = OutputRing::host(config.slots as usize, max_output_samples(chain, max_frame_bytes))?;
    let writer = ring.writer()?;
    let server = OutputServer::start(ring, &config.socket)?;
    Ok(Some(ServedOutputs { writer, server }))
}

/// As [`serve_host_outputs`] for the CUDA backend: the ring's data region is
/// device memory of `ctx` (device `ordinal`), exported as a CUDA IPC handle;
/// the loop's graph writes it (`CudaLoop::with_output`).
pub fn serve_device_outputs(
    config: &OutputConfig,
    chain: &[OpSpec],
    max_frame_bytes: usize,
    ctx: &std::sync::Arc<cudarc::driver::CudaContext>,
    ordinal: i32,
) -> Result<Option<ServedOutputs>, OutputError> {
    if !config.enabled {
        return Ok(None);
    }
    let (slots, sample_capacity) = (config.slots as usize, max_output_samples(chain, max_frame_bytes));
    let bytes = OutputGeometry::new(slots, sample_capacity)
        .and_then(|g| g.data_bytes())
        .ok_or(OutputError::BadGeometry { slots, sample_capacity })?;
    let data = DeviceOutputMemory::new(ctx, ordinal, bytes)?;
    let ring = OutputRing::new(Box::new(data), slots, sample_capacity)?;
    let writer = ring.writer()?;
    let server = OutputServer::start(ring, &config.socket)?;
    Ok(Some(ServedOutputs { writer, server }))
}

/// The most samples a chain produces for frames of at most
/// `max_frame_bytes` bytes: what an output slot must hold. Every CPU
/// operator keeps or shrinks the sample count of the unpack operator.
pub fn max_output_samples(chain: &[OpSpec], max_frame_bytes: usize) -> usize {
    match chain.first() {
        Some(OpSpec::Unpack { format, .. }) => format.samples_in(max_frame_bytes),
        _ => 0,
    }
}
