//! `frameloop-ring-writer SOCKET SLOTS CAPACITY`: serves a host-memory
//! output ring on SOCKET, as the appliance does, and publishes known
//! outputs when told to on standard input — what the Python tests attach to.
//!
//! Commands, one a line; each is answered with one line:
//! - `publish N`: publishes N outputs, answers `head H` (the newest sequence);
//! - `consumers`: answers `consumers C read R` (attached consumers, and the
//!   `last_read_seq` of the first, 0 without one);
//! - `quit`: stops (closing the socket, so consumers see the appliance gone).
//!
//! Output `s` has `samples_of(s)` samples `s * 1000 + i`, record fields
//! `result_seq s`, `ring_seq s + 100`, `frame_seq s + 200`, `stream_id 7`,
//! `sender_ts_ns s * 1000`, `detect_count s`, stats over its samples, and
//! user words `s * 100 + k` (tests/test_consumer.py mirrors this).

use frameloop::output::{OutputRing, OutputServer};
use frameloop::ring::ResultRecord;
use frameloop::ring::layout::{RESULT_HAS_DETECT, RESULT_HAS_STATS};
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Samples of output `seq` in a ring of `capacity` samples: `capacity`
/// less 0..=3, so lengths vary.
fn samples_of(seq: u64, capacity: usize) -> usize {
    capacity.saturating_sub((seq % 4) as usize).max(1)
}

fn output(seq: u64, capacity: usize) -> (ResultRecord, [u32; 12], Vec<f32>) {
    let samples: Vec<f32> = (0..samples_of(seq, capacity)).map(|i| (seq * 1000 + i as u64) as f32).collect();
    let sum: f32 = samples.iter().sum();
    let now = frameloop::clock::realtime_ns();
    let record = ResultRecord {
        result_seq: seq,
        ring_seq: seq + 100,
        frame_seq: seq + 200,
        stream_id: 7,
        sender_ts_ns: seq * 1000,
        published_ns: now,
        detect_ns: now,
        done_ns: now,
        sum,
        min: samples[0],
        max: samples[samples.len() - 1],
        mean: sum / samples.len() as f32,
        detect_count: seq as u32,
        first_detect_index: -1,
        result_flags: RESULT_HAS_STATS | RESULT_HAS_DETECT,
        ..Default::default()
    };
    let user = std::array::from_fn(|k| (seq * 100 + k as u64) as u32);
    (record, user, samples)
}

fn run(socket: PathBuf, slots: usize, capacity: usize) -> Result<(), String> {
    let ring = OutputRing::host(slots, capacity).map_err(|e| e.to_string())?;
    let mut writer = ring.writer().map_err(|e| e.to_string())?;
    let server = OutputServer::start(Arc::clone(&ring), &socket).map_err(|e| e.to_string())?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "serving {}", socket.display()).map_err(|e| e.to_string())?;
    for line in std::io::stdin().lock().lines() {
        let line = line.map_err(|e| e.to_string())?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let answer = match words.as_slice() {
            ["publish", n] => {
                let n: u64 = n.parse().map_err(|_| format!("publish takes a count, not {n:?}"))?;
                for _ in 0..n {
                    let (record, user, samples) = output(ring.head() + 1, capacity);
                    writer.publish(&record, &user, &samples).map_err(|e| e.to_string())?;
                }
                format!("head {}", ring.head())
            }
            ["consumers"] => {
                let snapshot = server.snapshot();
                let read = snapshot.consumers.first().map_or(0, |c| c.last_read_seq);
                format!("consumers {} read {read}", snapshot.consumers.len())
            }
            ["quit"] => break,
            _ => return Err(format!("unknown command {line:?}; use publish N, consumers or quit")),
        };
        writeln!(out, "{answer}").and_then(|()| out.flush()).map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [socket, slots, capacity] = args.as_slice() else {
        eprintln!("usage: frameloop-ring-writer SOCKET SLOTS CAPACITY");
        return ExitCode::from(2);
    };
    let (Ok(slots), Ok(capacity)) = (slots.parse(), capacity.parse()) else {
        eprintln!("SLOTS and CAPACITY are counts");
        return ExitCode::from(2);
    };
    match run(PathBuf::from(socket), slots, capacity) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("frameloop-ring-writer: {e}");
            ExitCode::FAILURE
        }
    }
}
