//! The frame log (`metrics.frame_log`): one CSV line per result with every
//! timestamp of its frame on the host clock, written by a thread of its own
//! so that the result path never waits for the disk.
//!
//! The latency table says how large a segment's tail is; the frame log says
//! which frames made it and when, so a tail can be laid beside what else
//! happened at that moment (a periodic chore, a stretch of late receives).
//! The result thread hands each line over through a bounded queue and
//! never blocks: when the writer falls behind, lines are dropped and
//! counted; a line the disk has no room for is lost and counted (the file
//! never ends in part of one, see [`super::record_file`]); the stop reports
//! all three counts.

use super::MetricsError;
use super::record_file::{LogCounters, RecordFile};
use super::segment::to_host_clock;
use crate::ring::ResultRecord;
use crate::ring::layout::RESULT_GPU_CLOCK;
use serde::Serialize;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, channel, sync_channel};
use std::time::Duration;

/// The CSV header: the columns of [`FrameLogLine`] in order. Times are
/// nanoseconds of CLOCK_REALTIME (GPU times converted with the loop's clock
/// offset); a time the frame does not have (no sender timestamp) is 0.
pub const FRAME_LOG_HEADER: &str = "result_seq,stream_id,frame_seq,ring_seq,slot_flags,result_flags,\
sender_ts_ns,first_rx_ns,last_rx_ns,published_ns,detect_ns,done_ns,seen_ns";

/// Lines the queue between the result thread and the writer holds: about
/// a second of frames at 16,000 frames/s.
const QUEUE_LINES: usize = 16_384;

/// One frame's line: its result as the result thread drained it, when the
/// host saw it, and the offset that puts its GPU times on the host clock.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FrameLogLine {
    record: ResultRecord,
    seen_ns: u64,
    clock_offset_ns: i64,
}

impl FrameLogLine {
    /// The line of result `r`, seen by the host at `seen_ns`, its GPU times
    /// (if any) converted with `clock_offset_ns`.
    pub fn new(r: &ResultRecord, seen_ns: u64, clock_offset_ns: i64) -> Self {
        Self { record: *r, seen_ns, clock_offset_ns }
    }

    /// The line's columns, in [`FRAME_LOG_HEADER`]'s order.
    fn write_csv(&self, out: &mut impl Write) -> io::Result<()> {
        let r = &self.record;
        let gpu = r.result_flags & RESULT_GPU_CLOCK != 0;
        writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.result_seq,
            r.stream_id,
            r.frame_seq,
            r.ring_seq,
            r.slot_flags,
            r.result_flags,
            r.sender_ts_ns,
            r.first_rx_ns,
            r.last_rx_ns,
            r.published_ns,
            to_host_clock(r.detect_ns, gpu, self.clock_offset_ns),
            to_host_clock(r.done_ns, gpu, self.clock_offset_ns),
            self.seen_ns
        )
    }
}

/// The result thread's end of the queue: [`FrameLogFeed::push`] never blocks.
pub struct FrameLogFeed {
    queue: SyncSender<FrameLogLine>,
    dropped: Arc<AtomicU64>,
}

impl FrameLogFeed {
    /// Queues `line` for the writer, or counts it dropped when the queue is
    /// full (or the writer has stopped).
    pub fn push(&self, line: FrameLogLine) {
        if self.queue.try_send(line).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// What the frame log holds at stop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FrameLogReport {
    pub path: PathBuf,
    /// Lines in the file, whole (a partial line is never left or counted).
    pub written: u64,
    /// Lines dropped because the writer fell behind the frames.
    pub dropped: u64,
    /// Lines that could not be written (a full disk, an I/O error).
    pub lost: u64,
    /// The last write error, if writing ever failed (or the writer did not
    /// finish in time).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The writer thread of a frame log.
pub struct FrameLog {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    counters: Arc<LogCounters>,
    dropped: Arc<AtomicU64>,
    /// Told when the writer has written what was queued.
    done: Receiver<()>,
}

impl FrameLog {
    /// Creates (truncates) `path`, writes the header and starts the writer;
    /// returns the log and the feed for the result sink. Fails only when the
    /// file cannot be created: a disk already full is warned about and its
    /// lines counted lost ([`RecordFile`]).
    pub fn create(path: &Path) -> Result<(FrameLog, FrameLogFeed), MetricsError> {
        let open_error = |source| MetricsError::OpenFrameLog { path: path.to_path_buf(), source };
        let file =
            RecordFile::create(path, "metrics.frame_log", format!("{FRAME_LOG_HEADER}\n").into_bytes())
                .map_err(open_error)?;
        let (queue, lines) = sync_channel(QUEUE_LINES);
        let (end, done) = channel();
        let log = FrameLog {
            path: path.to_path_buf(),
            stop: Arc::new(AtomicBool::new(false)),
            counters: file.counters(),
            dropped: Arc::new(AtomicU64::new(0)),
            done,
        };
        let stop = Arc::clone(&log.stop);
        std::thread::Builder::new()
            .name("frameloop-frames".into())
            .spawn(move || {
                write_lines(&lines, file, &stop);
                // Closed before the end is told: a line pushed after
                // `finish` returned is counted dropped, never left queued.
                drop(lines);
                // The log may have been dropped (nobody waits): nothing to tell.
                let _ = end.send(());
            })
            .map_err(MetricsError::Spawn)?;
        let feed = FrameLogFeed { queue, dropped: Arc::clone(&log.dropped) };
        Ok((log, feed))
    }

    /// The log's counts, live (for the metrics endpoint).
    pub fn counters(&self) -> Arc<LogCounters> {
        Arc::clone(&self.counters)
    }

    /// Stops the writer once it has written what is queued and says what
    /// the log holds; waits at most `wait` for it (a disk that stopped
    /// answering leaves the writer behind, and the report says so).
    pub fn finish(self, wait: Duration) -> FrameLogReport {
        self.stop.store(true, Ordering::Release);
        let error = match self.done.recv_timeout(wait) {
            Ok(()) => self.counters.last_error(),
            Err(_) => Some(format!(
                "the writer did not finish within {} ms; the file may end early",
                wait.as_millis()
            )),
        };
        FrameLogReport {
            path: self.path.clone(),
            written: self.counters.written.load(Ordering::Relaxed),
            dropped: self.dropped.load(Ordering::Relaxed),
            lost: self.counters.lost.load(Ordering::Relaxed),
            error,
        }
    }
}

impl Drop for FrameLog {
    /// A log dropped without [`FrameLog::finish`] still ends its writer,
    /// which writes what is queued; nothing waits for it.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}

/// Bytes of lines the writer gathers before writing them in one go.
const WRITE_BYTES: usize = 256 * 1024;

/// The writer: lines as they come until stopped and the queue is empty,
/// written a batch at a time (what is queued, up to [`WRITE_BYTES`]), each
/// line counted written or lost by the file.
fn write_lines(lines: &Receiver<FrameLogLine>, mut file: RecordFile, stop: &AtomicBool) {
    let (mut bytes, mut ends) = (Vec::with_capacity(WRITE_BYTES + 256), Vec::new());
    loop {
        let first = if stop.load(Ordering::Acquire) {
            lines.try_recv().ok()
        } else {
            match lines.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => Some(line),
                Err(RecvTimeoutError::Timeout) => continue,
                Err(RecvTimeoutError::Disconnected) => None,
            }
        };
        let Some(first) = first else { break };
        bytes.clear();
        ends.clear();
        let mut next = Some(first);
        while let Some(line) = next {
            // Writing into a vector cannot fail.
            let _ = line.write_csv(&mut bytes);
            ends.push(bytes.len());
            next = if bytes.len() < WRITE_BYTES { lines.try_recv().ok() } else { None };
        }
        file.append(&bytes, &ends);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(seq: u64, gpu_clock: bool) -> ResultRecord {
        ResultRecord {
            result_seq: seq,
            ring_seq: seq + 10,
            frame_seq: seq + 100,
            stream_id: 7,
            slot_flags: 1,
            result_flags: if gpu_clock { RESULT_GPU_CLOCK } else { 0 },
            sender_ts_ns: 1_000,
            first_rx_ns: 2_000,
            last_rx_ns: 3_000,
            published_ns: 4_000,
            detect_ns: 5_000,
            done_ns: 6_000,
            ..ResultRecord::default()
        }
    }

    #[test]
    fn lines_carry_every_time_on_the_host_clock() {
        let csv = |line: FrameLogLine| {
            let mut out = Vec::new();
            line.write_csv(&mut out).unwrap();
            String::from_utf8(out).unwrap()
        };
        let host = csv(FrameLogLine::new(&record(1, false), 9_000, 500));
        assert_eq!(host, "1,7,101,11,1,0,1000,2000,3000,4000,5000,6000,9000\n");
        // GPU times (detect, done) move by the offset; the host's do not.
        let gpu = csv(FrameLogLine::new(&record(1, true), 9_000, -500));
        assert_eq!(gpu, "1,7,101,11,1,4,1000,2000,3000,4000,4500,5500,9000\n");
        assert_eq!(gpu.trim_end().split(',').count(), FRAME_LOG_HEADER.split(',').count());
    }

    #[test]
    fn the_log_holds_a_header_and_every_line_pushed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("frames.csv");
        let (log, feed) = FrameLog::create(&path).unwrap();
        for seq in 1..=1000 {
            feed.push(FrameLogLine::new(&record(seq, false), 10_000 + seq, 0));
        }
        let report = log.finish(Duration::from_secs(10));
        assert_eq!((report.written + report.dropped, report.lost, report.error), (1000, 0, None));
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], FRAME_LOG_HEADER);
        assert_eq!(lines.len() as u64, 1 + report.written);
        assert!(lines[1].starts_with("1,7,101,11,"), "{}", lines[1]);
        // Pushed after the writer stopped: counted, not lost silently.
        feed.push(FrameLogLine::new(&record(1001, false), 0, 0));
        assert_eq!(feed.dropped.load(Ordering::Relaxed), report.dropped + 1);
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (queue, _held) = sync_channel(2);
        let feed = FrameLogFeed { queue, dropped: Arc::new(AtomicU64::new(0)) };
        for seq in 0..5 {
            feed.push(FrameLogLine::new(&record(seq, false), 0, 0));
        }
        assert_eq!(feed.dropped.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_log_that_cannot_be_created_names_its_path() {
        let err = FrameLog::create(Path::new("/no/such/dir/frames.csv")).err().unwrap();
        let text = err.to_string();
        assert!(text.contains("/no/such/dir/frames.csv") && text.contains("metrics.frame_log"), "{text}");
    }
}
