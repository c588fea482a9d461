//! A log file that only ever holds whole records (frame-log lines,
//! histogram-log intervals), and that a full disk degrades instead of
//! stopping: a record that cannot be written whole is cut back off the file
//! and counted lost, the next ones are tried again, and the appliance goes
//! on processing frames.
//!
//! The file says so once when writing starts failing, again at most every
//! [`WARN_EVERY`] while it goes on (with the count lost so far), and once
//! when writing works again. Its counts ([`LogCounters`]) are shared with
//! the metrics endpoint while it runs and end up in the stop report.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How often a log that keeps failing says so again.
pub const WARN_EVERY: Duration = Duration::from_secs(60);

/// Free space below which start-up warns that a log's filesystem is nearly full.
pub const LOW_SPACE_BYTES: u64 = 64 << 20;

/// What a log wrote and lost, readable from any thread while it runs.
#[derive(Debug, Default)]
pub struct LogCounters {
    /// Records in the file, whole.
    pub written: AtomicU64,
    /// Records that could not be written (a full disk, an I/O error).
    pub lost: AtomicU64,
    /// True while the last attempt to write failed.
    pub failing: AtomicBool,
    /// The last write error, if writing ever failed.
    last_error: Mutex<Option<String>>,
}

impl LogCounters {
    /// The last write error, if writing ever failed.
    pub fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn set_error(&self, e: &io::Error) {
        *self.last_error.lock().unwrap_or_else(PoisonError::into_inner) = Some(e.to_string());
    }
}

/// Where the bytes go: a file, or in tests a store of limited size.
pub trait Storage: Send {
    /// Writes `buf` at `offset`; the bytes written, as `pwrite` does.
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize>;
    /// Cuts the storage to `len` bytes.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
}

impl Storage for File {
    fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
        FileExt::write_at(self, buf, offset)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        File::set_len(self, len)
    }
}

/// An append-only file of whole records, after a header.
pub struct RecordFile<S: Storage = File> {
    path: PathBuf,
    /// The config key that names the file, for messages.
    key: &'static str,
    storage: S,
    /// Bytes of the header and the whole records written: the file's length.
    len: u64,
    /// The header, until it is written whole (every record goes after it).
    header: Option<Vec<u8>>,
    counters: Arc<LogCounters>,
    /// Since when writing fails, records lost since, and the last warning.
    failing: Option<Failing>,
}

struct Failing {
    since: Instant,
    lost: u64,
    warned: Instant,
}

impl RecordFile<File> {
    /// Creates (truncates) `path`, named by config key `key`, and writes
    /// `header`. Fails only when the file cannot be created; a header that
    /// does not fit (a disk already full) is warned about and written before
    /// the first record that can be. Warns when the filesystem has less
    /// than [`LOW_SPACE_BYTES`] free.
    pub fn create(path: &Path, key: &'static str, header: Vec<u8>) -> io::Result<Self> {
        let file = File::create(path)?;
        warn_if_low_on_space(path, key);
        Ok(Self::over(file, path, key, header))
    }
}

impl<S: Storage> RecordFile<S> {
    /// A record file in `storage` (empty), which `path` names in messages.
    pub fn over(storage: S, path: &Path, key: &'static str, header: Vec<u8>) -> Self {
        let mut file = Self {
            path: path.to_path_buf(),
            key,
            storage,
            len: 0,
            header: Some(header),
            counters: Arc::default(),
            failing: None,
        };
        file.append(&[], &[]);
        file
    }

    /// The counts, shared.
    pub fn counters(&self) -> Arc<LogCounters> {
        Arc::clone(&self.counters)
    }

    /// Appends the records in `bytes`, record `i` ending at `ends[i]`
    /// (increasing, the last at `bytes.len()`). What the storage takes whole
    /// stays; a record cut short is cut back off, so the file never ends in
    /// part of one, and it and the records after it are counted lost.
    /// Returns how many records were written.
    pub fn append(&mut self, bytes: &[u8], ends: &[usize]) -> usize {
        let header_len = self.header.as_ref().map_or(0, Vec::len);
        let mut done = 0;
        let mut error = None;
        let parts = [self.header.as_deref().unwrap_or(&[]), bytes];
        for part in parts {
            let mut at = 0;
            while at < part.len() {
                match self.storage.write_at(&part[at..], self.len + done as u64) {
                    Ok(0) => {
                        error = Some(io::Error::from(io::ErrorKind::WriteZero));
                        break;
                    }
                    Ok(n) => {
                        at += n;
                        done += n;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        error = Some(e);
                        break;
                    }
                }
            }
            if error.is_some() {
                break;
            }
        }
        // Whole records only: the header first, then each record it ends.
        let (kept, written) = if done < header_len {
            (0, 0)
        } else {
            let body = done - header_len;
            let written = ends.partition_point(|&end| end <= body);
            (header_len + written.checked_sub(1).map_or(0, |last| ends[last]), written)
        };
        if kept < done
            && let Err(e) = self.storage.set_len(self.len + kept as u64)
        {
            tracing::error!(
                "{} {}: cannot cut a partial record back off the file ({e}); it may end in part of one",
                self.key,
                self.path.display()
            );
        }
        self.len += kept as u64;
        if kept >= header_len {
            self.header = None;
        }
        let lost = ends.len() - written;
        self.counters.written.fetch_add(written as u64, Ordering::Relaxed);
        self.counters.lost.fetch_add(lost as u64, Ordering::Relaxed);
        match error {
            Some(e) => self.failed(&e, lost as u64),
            None => self.succeeded(),
        }
        written
    }

    /// Writing failed with `e`, losing `lost` records: say so when it starts,
    /// and again every [`WARN_EVERY`] while it lasts.
    fn failed(&mut self, e: &io::Error, lost: u64) {
        self.counters.set_error(e);
        self.counters.failing.store(true, Ordering::Relaxed);
        let now = Instant::now();
        match &mut self.failing {
            None => {
                tracing::warn!(
                    "{} {}: cannot write ({e}); records that do not fit are lost and counted \
                     (frameloop_log_lost_total), frames are processed as before; free space on its \
                     filesystem and writing resumes",
                    self.key,
                    self.path.display()
                );
                self.failing = Some(Failing { since: now, lost, warned: now });
            }
            Some(f) => {
                f.lost += lost;
                if now.duration_since(f.warned) >= WARN_EVERY {
                    tracing::warn!(
                        "{} {}: still cannot write ({e}): {} records lost in {} s",
                        self.key,
                        self.path.display(),
                        f.lost,
                        now.duration_since(f.since).as_secs()
                    );
                    f.warned = now;
                }
            }
        }
    }

    fn succeeded(&mut self) {
        if let Some(f) = self.failing.take() {
            self.counters.failing.store(false, Ordering::Relaxed);
            tracing::info!(
                "{} {}: writing again after {} s; {} records were lost",
                self.key,
                self.path.display(),
                f.since.elapsed().as_secs(),
                f.lost
            );
        }
    }
}

/// Warns (naming `key`) when the filesystem of `path` has less than
/// [`LOW_SPACE_BYTES`] free for an unprivileged writer.
fn warn_if_low_on_space(path: &Path, key: &str) {
    let Ok(fs) = nix::sys::statvfs::statvfs(path) else { return };
    let free = fs.blocks_available().saturating_mul(fs.fragment_size());
    if free < LOW_SPACE_BYTES {
        tracing::warn!(
            "{key} {}: only {} KiB free on its filesystem; once it is full the log loses what does not \
             fit (counted, frames go on); free space or point {key} elsewhere",
            path.display(),
            free / 1024
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A store of `capacity` bytes that, like a full disk, writes what fits
    /// and then fails with ENOSPC.
    struct Limited {
        bytes: Vec<u8>,
        capacity: usize,
    }

    impl Storage for Limited {
        fn write_at(&mut self, buf: &[u8], offset: u64) -> io::Result<usize> {
            let offset = offset as usize;
            assert!(offset <= self.bytes.len(), "a write past the end leaves a hole");
            let room = self.capacity.saturating_sub(offset);
            if room == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = buf.len().min(room);
            self.bytes.truncate(offset);
            self.bytes.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn set_len(&mut self, len: u64) -> io::Result<()> {
            self.bytes.truncate(len as usize);
            Ok(())
        }
    }

    fn lines(from: usize, to: usize) -> (Vec<u8>, Vec<usize>) {
        let (mut bytes, mut ends) = (Vec::new(), Vec::new());
        for i in from..to {
            bytes.extend_from_slice(format!("line {i}\n").as_bytes());
            ends.push(bytes.len());
        }
        (bytes, ends)
    }

    #[test]
    fn a_full_store_keeps_whole_records_and_counts_the_rest_lost() {
        let store = Limited { bytes: Vec::new(), capacity: 100 };
        let mut f = RecordFile::over(store, Path::new("t.log"), "metrics.frame_log", b"head\n".to_vec());
        let (bytes, ends) = lines(0, 30);
        let written = f.append(&bytes, &ends);
        let text = String::from_utf8(f.storage.bytes.clone()).unwrap();
        assert!(text.starts_with("head\n") && text.ends_with('\n'), "{text:?}");
        assert_eq!(text.lines().count(), 1 + written, "{text:?}");
        let c = f.counters();
        assert_eq!(c.written.load(Ordering::Relaxed) as usize, written);
        assert_eq!(c.lost.load(Ordering::Relaxed) as usize, 30 - written);
        assert!(c.failing.load(Ordering::Relaxed));
        assert!(c.last_error().unwrap().contains("No space left"), "{:?}", c.last_error());
        // Still full: everything lost, the file unchanged.
        let before = f.storage.bytes.clone();
        assert_eq!(f.append(&bytes, &ends), 0);
        assert_eq!(f.storage.bytes, before);
        // Space again: writing resumes where the whole records end.
        f.storage.capacity = 10_000;
        let (more, more_ends) = lines(100, 103);
        assert_eq!(f.append(&more, &more_ends), 3);
        assert!(!c.failing.load(Ordering::Relaxed));
        let text = String::from_utf8(f.storage.bytes.clone()).unwrap();
        assert!(text.ends_with("line 100\nline 101\nline 102\n"), "{text:?}");
        assert_eq!(text.lines().count(), 1 + written + 3);
    }

    #[test]
    fn a_store_full_from_the_start_gets_its_header_before_the_first_record() {
        let store = Limited { bytes: Vec::new(), capacity: 0 };
        let mut f = RecordFile::over(store, Path::new("t.log"), "metrics.frame_log", b"head\n".to_vec());
        let (bytes, ends) = lines(0, 3);
        assert_eq!(f.append(&bytes, &ends), 0);
        assert!(f.storage.bytes.is_empty());
        // Room for the header and part of a record: the header stays alone.
        f.storage.capacity = 8;
        assert_eq!(f.append(&bytes, &ends), 0);
        assert_eq!(f.storage.bytes, b"head\n");
        f.storage.capacity = 1000;
        assert_eq!(f.append(&bytes, &ends), 3);
        assert_eq!(f.storage.bytes, b"head\nline 0\nline 1\nline 2\n");
        assert_eq!(f.counters().lost.load(Ordering::Relaxed), 6);
    }

    #[test]
    fn a_real_file_holds_what_was_appended() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let mut f = RecordFile::create(&path, "metrics.frame_log", b"h\n".to_vec()).unwrap();
        let (bytes, ends) = lines(0, 2);
        assert_eq!(f.append(&bytes, &ends), 2);
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "h\nline 0\nline 1\n");
    }
}
