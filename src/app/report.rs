//! The report the appliance gives when it stops: what ran, its counters and
//! latency summary, as JSON or as a human-readable table.

use super::backend_factory::BackendPick;
use crate::backend::LoopStats;
use crate::ingest::IngestSnapshot;
use crate::metrics::Summary;
use std::path::PathBuf;

/// Everything the appliance reports when it stops.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    /// The backend that ran the chain, and why it was picked.
    pub backend: BackendPick,
    /// Seconds from start to stop.
    pub elapsed_s: f64,
    /// The address the receiver listened on.
    pub listen: String,
    /// Whether UDP GRO was on.
    pub gro: bool,
    /// What the resident loop counted.
    pub loop_stats: LoopStats,
    /// What the receiver counted (datagrams, frames, drops by cause).
    pub ingest: IngestSnapshot,
    /// Where the frame ring lives and how it is paged.
    pub frame_ring: RingMemoryReport,
    /// GPU clock to CLOCK_REALTIME offset used for the GPU timestamps, and
    /// the bound on its error (both 0 on the host backend).
    pub clock_offset_ns: i64,
    /// The bound on the error of `clock_offset_ns`.
    pub clock_error_ns: u64,
    /// RTP assembler counters (name, value), when the config has `[rtp]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtp: Option<Vec<(&'static str, u64)>>,
    /// What `--record` wrote.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recording: Option<RecordingReport>,
    /// The output ring and its consumers at stop, when `[output]` is enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outputs: Option<crate::metrics::OutputMetrics>,
    /// The NATS sink's counters at stop, when `[sink.nats]` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nats_sink: Option<crate::metrics::SinkMetrics>,
    /// The actuation outputs at stop, when `[[actuate]]` is configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub actuation: Option<crate::actuate::ActuationMetrics>,
    /// What the frame log holds, when `metrics.frame_log` is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame_log: Option<crate::metrics::FrameLogReport>,
    /// What the histogram log holds, when `metrics.histogram_log` (or
    /// `--histogram-log`) is set.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub histogram_log: Option<crate::metrics::HistogramLogReport>,
    /// The latency of every segment, and the counters.
    pub latency: Summary,
    /// What did not stop within `service.shutdown_timeout_ms` and was left
    /// behind (a hung thread, a wedged device); empty after a clean stop.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hung: Vec<String>,
    /// The bound the stop ran under (`service.shutdown_timeout_ms`).
    pub shutdown_timeout_ms: u64,
}

impl Report {
    /// Records the frame log and the histogram log could not write (lines
    /// and intervals lost, a full disk); 0 without either log.
    pub fn log_records_lost(&self) -> u64 {
        self.frame_log.as_ref().map_or(0, |f| f.lost)
            + self.histogram_log.as_ref().map_or(0, |h| h.intervals_lost)
    }
}

/// The frame ring's memory: what kind, how large, and how much of it the
/// kernel backs with huge pages (`ring.huge_pages`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RingMemoryReport {
    /// "host", "cuda-registered", "cuda-device", ...
    pub kind: &'static str,
    /// Its size.
    pub bytes: usize,
    /// Bytes in huge pages; absent where the host cannot say (GPU memory).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub huge_page_bytes: Option<usize>,
}

impl RingMemoryReport {
    /// Reads the figures of `memory` now.
    pub fn of(memory: &dyn crate::ring::RingMemory) -> Self {
        Self { kind: memory.kind(), bytes: memory.len(), huge_page_bytes: memory.huge_page_bytes() }
    }

    /// "64.0 MiB of host memory, all in huge pages", for the report and log.
    pub fn describe(&self) -> String {
        let mib = self.bytes as f64 / f64::from(1 << 20);
        let pages = match self.huge_page_bytes {
            None => String::new(),
            Some(0) => ", in base pages".to_string(),
            Some(h) if h >= self.bytes => ", all in huge pages".to_string(),
            Some(h) => format!(", {:.1} MiB of it in huge pages", h as f64 / f64::from(1 << 20)),
        };
        format!("{mib:.1} MiB of {} memory{pages}", self.kind)
    }
}

/// What a recording of the received datagrams wrote.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecordingReport {
    /// The capture file.
    pub path: PathBuf,
    /// Datagrams written.
    pub datagrams: u64,
    /// Their UDP payload bytes.
    pub payload_bytes: u64,
    /// Datagrams not written: too large for one IP packet, or after a write error.
    pub not_written: u64,
    /// The write error that stopped the recording, if one did.
    pub error: Option<String>,
}

impl Report {
    /// The human-readable report: latency table, then counter sections.
    pub fn render(&self) -> String {
        let mut summary = self.latency.clone();
        let l = &self.loop_stats;
        summary.add_counters(
            "resident loop",
            [
                ("frames_processed", l.frames_processed),
                ("frames_skipped", l.frames_skipped),
                ("iterations", l.iterations),
                ("idle_iterations", l.idle_iterations),
            ],
        );
        summary.add_counters("ingest", self.ingest.iter());
        if let Some(rtp) = &self.rtp {
            summary.add_counters("rtp", rtp.iter().copied());
        }
        if let Some(outputs) = &self.outputs {
            summary.add_counters("output ring", outputs.counters());
        }
        if let Some(sink) = &self.nats_sink {
            summary.add_counters("nats sink", sink.counters());
        }
        if let Some(a) = &self.actuation {
            summary.add_counters("actuation", a.counter_rows());
        }
        let lost_because =
            |e: &Option<String>| e.as_ref().map_or(String::new(), |e| format!(" (last error: {e})"));
        let mut frame_log = match &self.frame_log {
            None => String::new(),
            Some(f) => format!(
                "frame log: {} lines written to {}{}{}{}\n",
                f.written,
                f.path.display(),
                if f.dropped > 0 {
                    format!(", {} dropped (the disk fell behind)", f.dropped)
                } else {
                    String::new()
                },
                if f.lost > 0 { format!(", {} lost (not written)", f.lost) } else { String::new() },
                lost_because(&f.error)
            ),
        };
        if let Some(h) = &self.histogram_log {
            frame_log.push_str(&format!(
                "histogram log: {} intervals written to {}{}{}\n",
                h.intervals_written,
                h.path.display(),
                if h.intervals_lost > 0 {
                    format!(", {} lost (not written)", h.intervals_lost)
                } else {
                    String::new()
                },
                lost_because(&h.error)
            ));
        }
        let recording = match &self.recording {
            None => String::new(),
            Some(r) => format!(
                "recorded {} datagrams ({} payload bytes, {} not written) to {}{}\n",
                r.datagrams,
                r.payload_bytes,
                r.not_written,
                r.path.display(),
                r.error.as_ref().map_or(String::new(), |e| format!(": stopped early: {e}"))
            ),
        };
        let hung = if self.hung.is_empty() {
            String::new()
        } else {
            format!(
                "did not stop within {} ms (left behind): {}\n",
                self.shutdown_timeout_ms,
                self.hung.join("; ")
            )
        };
        let actuation: String = self
            .actuation
            .iter()
            .flat_map(|a| &a.outputs)
            .map(|o| {
                let p = &o.ready_to_sent;
                format!(
                    "actuation {} -> {}: result ready to sent p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs\n",
                    o.name, o.destination, p.p50_us, p.p99_us, p.max_us
                )
            })
            .collect();
        let clock = if self.clock_error_ns > 0 {
            format!(
                "GPU times on the host clock: offset {} ns, within ±{:.1} µs\n",
                self.clock_offset_ns,
                self.clock_error_ns as f64 / 1000.0
            )
        } else {
            String::new()
        };
        format!(
            "backend: {} ({})\nframe ring: {}\n{clock}{recording}{frame_log}{actuation}{hung}listening on {} (UDP GRO {}), ran {:.1} s\n{}",
            self.backend.name(),
            self.backend.reason,
            self.frame_ring.describe(),
            self.listen,
            on_off(self.gro),
            self.elapsed_s,
            summary.render_table()
        )
    }
}

/// "on" or "off", for report and log lines.
pub(super) fn on_off(b: bool) -> &'static str {
    if b { "on" } else { "off" }
}
