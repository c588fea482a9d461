//! HdrHistogram interval logs: the standard text format (version header,
//! StartTime and BaseTime, legend, one `Tag=<segment>` line per segment per
//! interval with a V2-compressed base64 histogram) that HdrHistogram's own
//! tools read. Values are nanoseconds; `Interval_Max` is in nanoseconds too.

use super::histograms::LatencyHistograms;
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

/// Creates (truncating) the log file at `path` and writes its header.
pub fn create_interval_log(
    path: &std::path::Path,
    start_ns: u64,
) -> Result<IntervalLogWriter<Box<dyn Write + Send>>, super::MetricsError> {
    let open_error = |source| super::MetricsError::Open { path: path.to_path_buf(), source };
    let file = std::fs::File::create(path).map_err(open_error)?;
    let out: Box<dyn Write + Send> = Box::new(io::BufWriter::new(file));
    IntervalLogWriter::new(out, start_ns).map_err(open_error)
}
