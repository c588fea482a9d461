//! frameloop: a low-latency sensor-ingest appliance. Frames arrive over UDP
//! (or RDMA), land in a frame ring the GPU can read, and a persistent,
//! GPU-resident graph (or its host twin) runs a linear chain of operators on
//! each one while every segment of its latency goes into HDR histograms.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod actuate;
pub mod app;
pub mod backend;
pub mod capture;
pub mod clock;
pub mod config;
pub mod fragment;
pub mod gpu;
pub mod host;
pub mod ingest;
pub mod metrics;
pub mod ops;
pub mod output;
pub mod rdma;
pub mod realtime;
pub mod reload;
pub mod ring;
pub mod rtp;
pub mod sender;
pub mod service;
pub mod sink;
pub mod small_file;
pub mod topology;
pub mod wire;
