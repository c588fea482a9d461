//! `frameloop.ResultRecord`: one processed frame's result record, as the
//! result thread saw it (`Appliance.results()`).

use crate::frame::Stats;
use frameloop::ring::ResultRecord as Record;
use frameloop::ring::layout::RESULT_GPU_CLOCK;
use pyo3::prelude::*;

/// One frame's result: its sequence numbers, timestamps (ns), the stats
/// and threshold operators' figures, the user words a kernel wrote, and the
/// parameter generation it ran with.
#[pyclass(module = "frameloop", name = "ResultRecord", frozen, get_all)]
pub struct ResultRecord {
    pub result_seq: u64,
    pub ring_seq: u64,
    /// The sender's frame number.
    pub frame_seq: u64,
    pub stream_id: u32,
    pub slot_flags: u32,
    pub sender_ts_ns: u64,
    pub first_rx_ns: u64,
    pub last_rx_ns: u64,
    pub published_ns: u64,
    pub detect_ns: u64,
    pub done_ns: u64,
    pub stats: Stats,
    /// Samples the chain produced.
    pub output_len: u32,
    pub result_flags: u32,
    /// True when `detect_ns` and `done_ns` are GPU `%globaltimer` values.
    pub gpu_clock: bool,
    pub skipped_before: u64,
    /// The 12 user result words a user kernel wrote.
    pub user: Vec<u32>,
    /// The parameter generation the frame ran with (0: the start-up config).
    pub param_generation: u32,
}

impl From<Record> for ResultRecord {
    fn from(r: Record) -> Self {
        Self {
            result_seq: r.result_seq,
            ring_seq: r.ring_seq,
            frame_seq: r.frame_seq,
            stream_id: r.stream_id,
            slot_flags: r.slot_flags,
            sender_ts_ns: r.sender_ts_ns,
            first_rx_ns: r.first_rx_ns,
            last_rx_ns: r.last_rx_ns,
            published_ns: r.published_ns,
            detect_ns: r.detect_ns,
            done_ns: r.done_ns,
            stats: Stats::of(&r),
            output_len: r.output_len,
            result_flags: r.result_flags,
            gpu_clock: r.result_flags & RESULT_GPU_CLOCK != 0,
            skipped_before: r.skipped_before,
            user: r.user.to_vec(),
            param_generation: r.param_generation,
        }
    }
}

#[pymethods]
impl ResultRecord {
    fn __repr__(&self) -> String {
        format!(
            "ResultRecord(frame_seq={}, stream_id={}, output_len={}, param_generation={}, stats={:?})",
            self.frame_seq, self.stream_id, self.output_len, self.param_generation, self.stats.sum
        )
    }
}
