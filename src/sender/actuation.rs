//! Closing the loop at the sensor: `frameloop send --expect-actuation`
//! waits for the appliance's actuation messages, matches each to the frame
//! it answers (stream, frame sequence and the echoed send time) and records
//! the sensor-to-actuator round trip on this process's own clock: the
//! message's arrival minus the time this sender stamped on the frame, so no
//! clock calibration enters the figure. Missing, late, duplicate, malformed
//! and unmatched messages are counted.

use crate::clock::realtime_ns;
use crate::metrics::Percentiles;
use crate::wire::actuation::decode;
use hdrhistogram::Histogram;
use socket2::Socket;
use std::collections::{HashMap, HashSet};
use std::io;
use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Which frames the appliance is expected to answer.
#[derive(serde::Serialize, Debug, Clone, Copy, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ExpectActuation {
    /// Every frame, once per output: frames without a message count as missing.
    #[default]
    Every,
    /// Some frames (outputs sending on detection or on a user flag): nothing
    /// counts as missing.
    Some,
}

/// The send times this sender stamped, per stream by frame sequence.
#[derive(Debug, Default)]
pub struct SentFrames {
    stamps: Mutex<HashMap<u32, Vec<u64>>>,
}

impl SentFrames {
    /// Notes that frame `seq` of `stream` carries send time `ts_ns`; call it
    /// before the frame leaves (its answer may come back at once).
    pub fn stamped(&self, stream: u32, seq: u64, ts_ns: u64) {
        let mut m = self.stamps.lock().unwrap_or_else(PoisonError::into_inner);
        let v = m.entry(stream).or_default();
        if v.len() as u64 == seq {
            v.push(ts_ns);
        }
    }

    fn stamp(&self, stream: u32, seq: u64) -> Option<u64> {
        let m = self.stamps.lock().unwrap_or_else(PoisonError::into_inner);
        m.get(&stream).and_then(|v| usize::try_from(seq).ok().and_then(|i| v.get(i))).copied()
    }

    fn total(&self) -> u64 {
        self.stamps.lock().unwrap_or_else(PoisonError::into_inner).values().map(|v| v.len() as u64).sum()
    }
}

/// What came back, at the end of a run.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RoundTripReport {
    /// Datagrams received on the actuation socket.
    pub messages: u64,
    /// Messages matched to a frame this sender sent (first of each).
    pub matched: u64,
    /// With `every`: (frame, output) pairs no message came for.
    pub missing: u64,
    /// Matched messages whose round trip exceeded `--actuation-late-ms`
    /// (still in the histogram).
    pub late: u64,
    /// Further messages for a (frame, output) already answered.
    pub duplicate: u64,
    /// Datagrams that are not actuation messages, or whose echoed send time
    /// is not the one the frame carried.
    pub malformed: u64,
    /// Well-formed messages for a frame this sender never sent.
    pub unmatched: u64,
    /// Sensor to actuator: arrival minus the frame's send time, this clock.
    pub round_trip: Percentiles,
}

struct WatchState {
    report: RoundTripReport,
    seen: HashSet<(u16, u32, u64)>,
    outputs: HashSet<u16>,
    histogram: Histogram<u64>,
    sum_ns: u128,
}

/// The thread reading actuation messages during a run.
pub struct ActuationWatch {
    stop: Arc<AtomicBool>,
    state: Arc<Mutex<WatchState>>,
    sent: Arc<SentFrames>,
    /// Invariant: `Some` until `finish` joins it.
    thread: Option<JoinHandle<()>>,
}

impl ActuationWatch {
    /// Starts reading `socket` (a handle on the sender's own socket, where
    /// replies come, or one bound to `--actuation-listen`).
    pub fn start(socket: Socket, late_ns: u64) -> io::Result<Self> {
        socket.set_read_timeout(Some(Duration::from_millis(20)))?;
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(SentFrames::default());
        let state = Arc::new(Mutex::new(WatchState {
            report: RoundTripReport::default(),
            seen: HashSet::new(),
            outputs: HashSet::new(),
            histogram: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static bounds are valid"),
            sum_ns: 0,
        }));
        let (st, stp, snt) = (Arc::clone(&state), Arc::clone(&stop), Arc::clone(&sent));
        let thread = std::thread::Builder::new()
            .name("frameloop-actuation-rx".into())
            .spawn(move || read_messages(&socket, &st, &stp, &snt, late_ns))?;
        Ok(Self { stop, state, sent, thread: Some(thread) })
    }

    /// Where the sender notes each frame's send time.
    pub fn sent(&self) -> &Arc<SentFrames> {
        &self.sent
    }

    /// Waits `grace` for the last answers, stops reading and reports;
    /// `outputs` is how many outputs answer each frame with `expect` every
    /// (0: as many as sent anything).
    pub fn finish(mut self, grace: Duration, expect: ExpectActuation, outputs: u32) -> RoundTripReport {
        std::thread::sleep(grace);
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let mut report = s.report.clone();
        report.round_trip = Percentiles::of(&s.histogram, s.sum_ns);
        if expect == ExpectActuation::Every {
            let outputs = if outputs == 0 { s.outputs.len().max(1) as u64 } else { u64::from(outputs) };
            report.missing = (self.sent.total() * outputs).saturating_sub(report.matched);
        }
        report
    }
}

impl Drop for ActuationWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn read_messages(
    socket: &Socket,
    state: &Mutex<WatchState>,
    stop: &AtomicBool,
    sent: &SentFrames,
    late_ns: u64,
) {
    let mut buf = vec![MaybeUninit::<u8>::uninit(); 65_536];
    while !stop.load(Ordering::Acquire) {
        let n = match socket.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
                ) =>
            {
                continue;
            }
            // ICMP errors for the frames this socket sends (no listener yet): not ours to count.
            Err(_) => continue,
        };
        let arrived = realtime_ns();
        // SAFETY: `recv` initialised the first `n` bytes of `buf`.
        let bytes = unsafe { std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), n) };
        on_message(bytes, arrived, state, sent, late_ns);
    }
}

/// Counts one received datagram, arrived at `arrived_ns` (this clock).
fn on_message(bytes: &[u8], arrived_ns: u64, state: &Mutex<WatchState>, sent: &SentFrames, late_ns: u64) {
    let mut s = state.lock().unwrap_or_else(PoisonError::into_inner);
    s.report.messages += 1;
    let Ok(m) = decode(bytes) else {
        s.report.malformed += 1;
        return;
    };
    let h = m.header;
    let Some(stamp) = sent.stamp(h.stream_id, h.frame_seq) else {
        s.report.unmatched += 1;
        return;
    };
    if stamp != h.sender_ts_ns {
        s.report.malformed += 1;
        return;
    }
    if !s.seen.insert((h.output, h.stream_id, h.frame_seq)) {
        s.report.duplicate += 1;
        return;
    }
    s.outputs.insert(h.output);
    s.report.matched += 1;
    let rtt = arrived_ns.saturating_sub(stamp).max(1);
    if rtt > late_ns {
        s.report.late += 1;
    }
    s.histogram.saturating_record(rtt);
    s.sum_ns += u128::from(rtt);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::ResultRecord;
    use crate::wire::actuation::{MessageInput, MessageShape, PART_RECORD, form};

    fn message(output: u16, stream: u32, seq: u64, ts: u64) -> Vec<u8> {
        let r = ResultRecord { stream_id: stream, frame_seq: seq, sender_ts_ns: ts, ..Default::default() };
        let mut buf = vec![0u8; 512];
        let input =
            MessageInput { output, message_seq: 1, flags: 0, record: &r, user: &[0; 12], samples: &[] };
        let n = form(MessageShape { parts: PART_RECORD, samples: 0 }, &input, &mut buf).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn each_answer_is_matched_once_and_every_fault_counted() {
        let sent = SentFrames::default();
        for seq in 0..4 {
            sent.stamped(0, seq, 1_000 + seq);
        }
        let state = Mutex::new(WatchState {
            report: RoundTripReport::default(),
            seen: HashSet::new(),
            outputs: HashSet::new(),
            histogram: Histogram::new_with_bounds(1, 60_000_000_000, 3).unwrap(),
            sum_ns: 0,
        });
        let late = 500;
        on_message(&message(0, 0, 0, 1_000), 1_100, &state, &sent, late);
        on_message(&message(0, 0, 1, 1_001), 2_001, &state, &sent, late);
        on_message(&message(0, 0, 1, 1_001), 2_002, &state, &sent, late);
        on_message(&message(0, 0, 2, 7), 2_003, &state, &sent, late);
        on_message(&message(0, 9, 0, 1_000), 2_004, &state, &sent, late);
        on_message(b"not a message", 2_005, &state, &sent, late);
        let s = state.lock().unwrap();
        let r = &s.report;
        assert_eq!(
            (r.messages, r.matched, r.duplicate, r.malformed, r.unmatched, r.late),
            (6, 2, 1, 2, 1, 1)
        );
        assert_eq!(s.histogram.len(), 2);
        assert_eq!(s.histogram.max(), 1000, "second answer: 2001 - 1001");
    }
}
