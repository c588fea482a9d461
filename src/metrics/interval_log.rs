//! HdrHistogram interval logs: the standard text format (version header,
//! StartTime and BaseTime, legend, one `Tag=<segment>` line per segment per
//! interval with a V2-compressed base64 histogram) that HdrHistogram's own
//! tools read. Values are nanoseconds; `Interval_Max` is in nanoseconds too.
//! On disk ([`IntervalLogFile`]) each interval is one whole record: a full
//! disk loses intervals, counted, and never the run.

use super::histograms::LatencyHistograms;
use super::record_file::{LogCounters, RecordFile};
use super::segment::Segment;
use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};
use std::io::{self, Write};
use std::time::{Duration, UNIX_EPOCH};

/// The format version line of the log header.
pub const LOG_FORMAT_VERSION: &str = "[Histogram log format version 1.3]";
/// The legend line HdrHistogram's writers emit after the header.
pub const LEGEND: &str =
    "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"";

/// Writes one interval log to `W`.
pub struct IntervalLogWriter<W: Write> {
    out: W,
    serializer: V2DeflateSerializer,
    /// BaseTime of the log (ns since the epoch): interval start stamps are relative to it.
    base_ns: u64,
}

impl<W: Write> IntervalLogWriter<W> {
    /// Starts a log whose StartTime and BaseTime are `start_ns` (ns since the
    /// epoch) and writes its header.
    pub fn new(mut out: W, start_ns: u64) -> io::Result<Self> {
        let start = UNIX_EPOCH + Duration::from_nanos(start_ns);
        let mut serializer = V2DeflateSerializer::new();
        IntervalLogWriterBuilder::new()
            .add_comment("frameloop latency segments; values in nanoseconds; Tag names the segment")
            .add_comment(LOG_FORMAT_VERSION)
            .with_start_time(start)
            .with_base_time(start)
            .begin_log_with(&mut out, &mut serializer)?;
        writeln!(out, "{LEGEND}")?;
        Ok(Self { out, serializer, base_ns: start_ns })
    }

    /// Writes one line per segment for the interval `[start_ns, end_ns)`.
    /// Empty segments are written too, so every interval has every tag.
    pub fn write_interval(&mut self, h: &LatencyHistograms, start_ns: u64, end_ns: u64) -> io::Result<()> {
        let start = Duration::from_nanos(start_ns.saturating_sub(self.base_ns));
        let length = Duration::from_nanos(end_ns.saturating_sub(start_ns));
        for segment in Segment::ALL {
            // An empty builder writes no header lines.
            let mut log =
                IntervalLogWriterBuilder::new().begin_log_with(&mut self.out, &mut self.serializer)?;
            log.write_histogram(h.histogram(segment), start, length, Tag::new(segment.name()))
                .map_err(|e| io::Error::other(format!("interval log: {e}")))?;
        }
        Ok(())
    }

    /// Flushes what was written.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// What the histogram log holds at stop.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HistogramLogReport {
    pub path: std::path::PathBuf,
    /// Intervals in the file, whole.
    pub intervals_written: u64,
    /// Intervals that could not be written (a full disk, an I/O error).
    pub intervals_lost: u64,
    /// The last write error, if writing ever failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl HistogramLogReport {
    /// The report of the log at `path` from its counts.
    pub fn of(path: &std::path::Path, counters: &LogCounters) -> Self {
        use std::sync::atomic::Ordering;
        Self {
            path: path.to_path_buf(),
            intervals_written: counters.written.load(Ordering::Relaxed),
            intervals_lost: counters.lost.load(Ordering::Relaxed),
            error: counters.last_error(),
        }
    }
}

/// An interval log on disk: each interval is one record of a
/// [`RecordFile`], so a full disk loses whole intervals (counted), never
/// leaves part of one in the file, and never stops the appliance.
pub struct IntervalLogFile {
    writer: IntervalLogWriter<Vec<u8>>,
    file: RecordFile,
}

impl IntervalLogFile {
    /// Writes the interval `[start_ns, end_ns)` of every segment as one
    /// record; false when it could not be written (counted lost).
    pub fn write_interval(&mut self, h: &LatencyHistograms, start_ns: u64, end_ns: u64) -> bool {
        self.writer.out.clear();
        if let Err(e) = self.writer.write_interval(h, start_ns, end_ns) {
            // Serialising into memory; only a histogram the format cannot hold fails.
            tracing::error!("metrics.histogram_log: an interval could not be encoded: {e}");
            return false;
        }
        let len = self.writer.out.len();
        self.file.append(&self.writer.out, &[len]) == 1
    }

    /// Intervals written and lost, live.
    pub fn counters(&self) -> std::sync::Arc<LogCounters> {
        self.file.counters()
    }
}

/// Creates (truncating) the log file at `path` and writes its header (or,
/// on a disk already full, warns and writes it before the first interval
/// that fits).
pub fn create_interval_log(
    path: &std::path::Path,
    start_ns: u64,
) -> Result<IntervalLogFile, super::MetricsError> {
    let open_error = |source| super::MetricsError::Open { path: path.to_path_buf(), source };
    let mut writer = IntervalLogWriter::new(Vec::new(), start_ns).map_err(open_error)?;
    let header = std::mem::take(&mut writer.out);
    let file = RecordFile::create(path, "metrics.histogram_log", header).map_err(open_error)?;
    Ok(IntervalLogFile { writer, file })
}
