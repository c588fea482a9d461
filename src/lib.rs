//! frameloop is a low-latency sensor-ingest appliance. A sensor (a camera, a
//! digitiser, a radio front end) sends frames as UDP datagrams (native
//! frameloop datagrams, RFC 4175 RTP video, or an HSB-style bridge) or writes
//! them over RDMA; they land in a frame ring in pinned memory that the GPU can
//! read, and a persistent, GPU-resident CUDA graph runs a linear chain of
//! operators on every frame the moment it is whole. A CPU backend (`host`)
//! runs the same chain with the same rings on machines without a GPU. Every
//! segment of every frame's latency (wire to ring, ring to GPU, chain, result)
//! goes into HDR histograms, and results reach consumers zero-copy through
//! output rings (Rust and Python), a NATS sink, or captures.
//!
//! It is meant for people who build instruments and need the GPU to see each
//! frame within microseconds of its last datagram, with numbers that prove it.
//! The `frameloop` binary runs it as a service (`frameloop run --config
//! frameloop.toml`); this library is what the binary is built from, for
//! those who embed the appliance, add their own GPU operators, or consume
//! its results.
//!
//! # Entry points
//!
//! - **The appliance**: [`Appliance::start`] with a [`Config`], or
//!   [`Appliance::builder`]`(&cfg).`[`operator`](ApplianceBuilder::operator)`(position, op).`[`start`](ApplianceBuilder::start)`()`
//!   to insert Rust GPU operators into the chain. [`Appliance::stop`] returns
//!   a [`Report`]; [`AppError`] says what stopped it and how to fix it.
//! - **The config**: [`Config`] is the TOML file (`systemd/frameloop.toml`
//!   documents every key). [`config::load`] reads a file and [`config::parse`]
//!   text; both validate everything at once and return
//!   [`ConfigError::Invalid`] with one [`ConfigProblem`] per key (what
//!   `frameloop validate` prints).
//! - **The consumer of output rings**: [`Consumer::attach`] to an appliance's
//!   `output.socket`, then [`Consumer::next`] yields each [`OutputFrame`]
//!   without a copy (host memory, or CUDA device memory by IPC).
//! - **Rust GPU operators**: implement [`GpuResidentOperator`] (declare ports
//!   in [`setup`](GpuResidentOperator::setup), enqueue kernels in
//!   [`compute`](GpuResidentOperator::compute)); the [`fragment`] module holds
//!   the rest of that API, and [`OperatorPosition`] says where an operator goes.
//! - **The sensor emulator**: [`sender::run_sender`] sends frames at a paced
//!   rate as a sensor would ([`SendArgs`] are the `frameloop send` flags).
//! - **The latency summary**: [`Report::latency`] is a [`Summary`], one
//!   [`metrics::SegmentSummary`] of [`Percentiles`] per [`Segment`];
//!   [`Summary::render_table`] prints it as the binary does.
//!
//! # Example
//!
//! Start the appliance on the host backend on a free port, and stop it:
//!
//! ```
//! use frameloop::config::BackendChoice;
//! use frameloop::{Appliance, Config, StartOptions};
//!
//! let mut cfg = Config::default();
//! cfg.backend = BackendChoice::Host;
//! cfg.ingest.bind = "127.0.0.1:0".into();
//! let app = Appliance::start(&cfg, StartOptions::default())?;
//! println!("listening on {}", app.local_addr());
//! // A sensor (or `frameloop send --to <address>`) sends frames here.
//! let report = app.stop()?;
//! println!("{} frames\n{}", report.loop_stats.frames_processed, report.latency.render_table());
//! # Ok::<(), frameloop::AppError>(())
//! ```
//!
//! Read an appliance's results (it runs with `[output] enabled = true`):
//!
//! ```no_run
//! let mut consumer = frameloop::Consumer::attach("/run/frameloop/output.sock")?;
//! while let Some(frame) = consumer.next() {
//!     println!("output {}: {} samples", frame.sequence(), frame.len());
//! }
//! # Ok::<(), frameloop::OutputError>(())
//! ```
//!
//! # Modules
//!
//! The public modules are [`app`] (the appliance and the commands the binary
//! runs), [`config`], [`output`], [`fragment`], [`metrics`] and [`sender`].
//! The other modules are reachable only for frameloop's own binary,
//! integration tests, fuzz targets, examples and Python module; they are not
//! part of the API and may change in any release.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(missing_docs)]

pub mod app;

// Modules marked #[doc(hidden)] below are reachable only for frameloop's own
// binary, integration tests, fuzz targets, examples and Python module; they
// are not part of the API.
#[doc(hidden)]
pub mod actuate;
#[doc(hidden)]
pub mod backend;
#[doc(hidden)]
pub mod capture;
#[doc(hidden)]
pub mod clock;
pub mod config;
mod config_problem;
#[doc(hidden)]
pub mod cuda;
pub mod fragment;
#[doc(hidden)]
pub mod gpu;
#[doc(hidden)]
pub mod host;
#[doc(hidden)]
pub mod ingest;
pub mod metrics;
#[doc(hidden)]
pub mod ops;
pub mod output;
#[doc(hidden)]
pub mod plot;
#[doc(hidden)]
pub mod rdma;
mod realtime;
#[doc(hidden)]
pub mod reload;
#[doc(hidden)]
pub mod ring;
#[doc(hidden)]
pub mod rtp;
pub mod sender;
#[doc(hidden)]
pub mod service;
#[doc(hidden)]
pub mod sink;
mod small_file;
#[doc(hidden)]
pub mod topology;
#[doc(hidden)]
pub mod web;
#[doc(hidden)]
pub mod wire;

pub use app::{AppError, Appliance, ApplianceBuilder, Report, StartOptions};
pub use backend::Backend;
pub use config::{Config, ConfigError, ConfigProblem};
pub use fragment::{ComputeContext, FragmentError, GpuResidentOperator, OperatorSpec, PortMemory};
pub use gpu::chain_builder::OperatorPosition;
pub use metrics::{Percentiles, Segment, Summary};
pub use output::{Consumer, OutputError, OutputFrame};
pub use sender::{SendArgs, SendError, SenderStats};
