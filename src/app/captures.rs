//! The `record` and `replay` commands, and the tap behind `run --record`
//! that writes what the appliance's receiver takes off the socket as pcapng.

use super::report::RecordingReport;
use super::{AppError, load_or_default, signals};
use crate::capture::{self, DatagramTap, InProcessSetup, PcapngRecorder, RecordArgs, ReplayArgs};
use std::fs::File;
use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::mpsc;

/// `frameloop record`: records until `--duration`, `--count` or a signal,
/// then prints what it wrote.
pub fn record(args: &RecordArgs) -> Result<(), AppError> {
    signals::install().map_err(AppError::Signals)?;
    let summary = capture::record(args, signals::stop_flag(), |addr: SocketAddr| {
        eprintln!("recording UDP datagrams sent to {addr} into {}", args.out.display());
    })?;
    let s = summary.stats;
    println!(
        "recorded {} datagrams ({} payload bytes) to {}{}",
        s.recorded,
        s.payload_bytes,
        args.out.display(),
        if s.too_large > 0 {
            format!("; {} too large for one IP packet, not written", s.too_large)
        } else {
            String::new()
        }
    );
    Ok(())
}

/// `frameloop replay`: replays a capture to `--to` or in-process (with the
/// ring, reassembly, chain and wire format of `config`, or the defaults),
/// prints the summary, and fails when the capture could not be read to its end.
pub fn replay(args: &ReplayArgs, config: Option<&Path>) -> Result<(), AppError> {
    signals::install().map_err(AppError::Signals)?;
    let mut replay_args = args.clone();
    let setup = match replay_args.to {
        Some(_) => None,
        None => {
            let cfg = load_or_default(config)?;
            // The config decides the wire format, as it does for `frameloop run`.
            let rtp = match &cfg.rtp {
                Some(r) => {
                    Some(r.resolve().map_err(|p| AppError::Config(crate::config::ConfigError::Invalid(p)))?)
                }
                None => None,
            };
            replay_args.rtp |= rtp.is_some();
            Some(InProcessSetup::from_config(&cfg, rtp))
        }
    };
    let stop = signals::stop_flag();
    let summary = capture::replay(&replay_args, setup.as_ref(), stop)?;
    print!("{}", summary.render());
    if summary.unparsed_tails > 0 {
        tracing::warn!(
            "{}: {} bytes after the native datagrams of {} UDP payloads are no native datagram and were not replayed",
            args.file.display(),
            summary.unparsed_tail_bytes,
            summary.unparsed_tails
        );
    }
    if summary.gaps_shortened > 0 {
        tracing::info!(
            "{} gaps between datagrams shortened to --max-gap-ms {} (the longest {:.3} s)",
            summary.gaps_shortened,
            args.max_gap_ms,
            summary.longest_gap_ns as f64 / 1e9
        );
    }
    match summary.ended_early {
        Some(why) if !stop.load(Ordering::Acquire) => {
            Err(AppError::ReplayEnded { file: args.file.clone(), why })
        }
        _ => Ok(()),
    }
}

/// A pcapng recording fed by the receiver. When the receiver drops it (its
/// thread ended), the file is finished and the outcome sent on `done`.
pub(super) struct FileTap {
    /// `Some` until dropped.
    recorder: Option<PcapngRecorder<BufWriter<File>>>,
    path: PathBuf,
    done: mpsc::Sender<RecordingReport>,
}

/// Creates `path` and returns the tap recording into it and where its
/// outcome arrives once the tap is dropped.
pub(super) fn recording_tap(path: &Path) -> Result<(FileTap, mpsc::Receiver<RecordingReport>), AppError> {
    let recorder = PcapngRecorder::create(path).map_err(AppError::RecordFile)?;
    let (done, outcome) = mpsc::channel();
    Ok((FileTap { recorder: Some(recorder), path: path.to_path_buf(), done }, outcome))
}

impl DatagramTap for FileTap {
    fn on_datagram(&mut self, src: SocketAddr, dst: SocketAddr, bytes: &[u8], rx_ns: u64) {
        if let Some(r) = self.recorder.as_mut() {
            r.on_datagram(src, dst, bytes, rx_ns);
        }
    }
}

impl Drop for FileTap {
    fn drop(&mut self) {
        let Some(recorder) = self.recorder.take() else { return };
        let stats = recorder.stats();
        let error = recorder.finish().err().map(|e| e.to_string());
        let report = RecordingReport {
            path: self.path.clone(),
            datagrams: stats.recorded,
            payload_bytes: stats.payload_bytes,
            not_written: stats.too_large + stats.not_written,
            error,
        };
        // The appliance may already be gone; then nobody needs the outcome.
        let _ = self.done.send(report);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capture::{CaptureReader, net};

    #[test]
    fn the_file_tap_finishes_its_file_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tap.pcapng");
        let (mut tap, outcome) = recording_tap(&path).unwrap();
        let (src, dst): (SocketAddr, SocketAddr) =
            ("10.0.0.2:4000".parse().unwrap(), "10.0.0.1:5000".parse().unwrap());
        tap.on_datagram(src, dst, b"first", 1_700_000_000_000_000_001);
        tap.on_datagram(src, dst, &[7u8; 1000], 1_700_000_000_000_000_002);
        assert!(outcome.try_recv().is_err(), "nothing is reported while recording");
        drop(tap);
        let report = outcome.try_recv().unwrap();
        assert_eq!(
            report,
            RecordingReport {
                path: path.clone(),
                datagrams: 2,
                payload_bytes: 1005,
                not_written: 0,
                error: None
            }
        );
        let mut reader = CaptureReader::open(&path).unwrap();
        for (payload, ts) in
            [(&b"first"[..], 1_700_000_000_000_000_001), (&[7u8; 1000][..], 1_700_000_000_000_000_002)]
        {
            let p = reader.next_packet().unwrap().unwrap();
            let udp = net::decode_udp(p.link_type, p.data).unwrap();
            assert_eq!((udp.src, udp.dst, udp.payload, p.ts_ns), (src, dst, payload, ts));
        }
        assert!(reader.next_packet().unwrap().is_none());
    }

    #[test]
    fn a_recording_into_a_missing_directory_fails_at_start() {
        let err = recording_tap(Path::new("/no/such/dir/x.pcapng")).err().expect("cannot create");
        assert!(err.to_string().contains("/no/such/dir/x.pcapng"), "{err}");
    }
}
