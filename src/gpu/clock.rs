//! Calibration of the GPU's `%globaltimer` against the host's CLOCK_REALTIME,
//! so that GPU detect/done times can be placed on the host timeline.
//!
//! A persistent one-thread kernel answers host requests with the GPU time at
//! which it saw each one; the host brackets every request with two
//! CLOCK_REALTIME reads. The round with the shortest bracket wins; half of its
//! width bounds the error of the offset.

use super::driver::{LaunchDims, launch_raw, stream_done, stream_sync};
use super::mapped::MappedMemory;
use super::{GpuError, KernelLibrary};
use crate::clock::realtime_ns;
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Result of one calibration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct ClockCalibration {
    /// Add to a `%globaltimer` value to get CLOCK_REALTIME ns.
    pub offset_ns: i64,
    /// Bound on the error of `offset_ns` (half the best round trip).
    pub error_ns: u64,
    /// Rounds measured.
    pub rounds: u32,
    /// Host CLOCK_REALTIME (ns) of the best round: when `offset_ns` held.
    pub measured_at_ns: u64,
    /// How fast the offset moves (ns per second of host time, i.e. ppb),
    /// from the previous calibration; 0 when there was none.
    pub drift_ppb: i64,
}

impl ClockCalibration {
    /// This calibration with its drift derived from `previous` (when the two
    /// are far enough apart for the difference to mean something).
    pub fn with_drift_since(mut self, previous: &ClockCalibration) -> Self {
        let elapsed = self.measured_at_ns.saturating_sub(previous.measured_at_ns);
        if previous.measured_at_ns > 0 && elapsed >= 100_000_000 {
            self.drift_ppb =
                ((self.offset_ns - previous.offset_ns) as i128 * 1_000_000_000 / elapsed as i128) as i64;
        }
        self
    }
}

/// Bytes of mapped memory `calibrate` exchanges its words through.
pub const PROBE_BYTES: usize = 4 * 64;

/// The memory and stream of the clock probe, allocated once while no graph
/// runs: allocating or freeing pinned memory later would wait for the
/// resident loop, which never finishes.
pub struct ClockProbe {
    mem: MappedMemory,
    stream: Arc<CudaStream>,
}

impl ClockProbe {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self, GpuError> {
        Ok(Self { mem: MappedMemory::alloc(ctx, PROBE_BYTES)?, stream: ctx.new_stream()? })
    }

    /// Measures the offset with `rounds` request/answer exchanges; safe
    /// while the resident loop runs (it allocates and frees nothing).
    pub fn calibrate(&self, lib: &KernelLibrary, rounds: u32) -> Result<ClockCalibration, GpuError> {
        calibrate_with(&self.mem, lib, &self.stream, rounds)
    }
}

fn calibrate_with(
    mem: &MappedMemory,
    lib: &KernelLibrary,
    stream: &Arc<CudaStream>,
    rounds: u32,
) -> Result<ClockCalibration, GpuError> {
    debug_assert!(crate::ring::RingMemory::len(mem) >= PROBE_BYTES);
    let word = |i: usize| -> &AtomicU64 {
        // SAFETY: the mapping holds 4 lines of 64 bytes, 8-aligned, alive for this function.
        unsafe { &*(mem.host_ptr().add(i * 64) as *const AtomicU64) }
    };
    let dptr = |i: usize| mem.dptr() + (i * 64) as u64;
    for i in 0..4 {
        word(i).store(0, Ordering::Release);
    }
    let (mut req, mut ans_seq, mut ans_ns, mut stop) = (dptr(0), dptr(1), dptr(2), dptr(3));
    let func = lib.function("fl_clock_probe")?;
    let mut params = [
        (&mut req as *mut u64).cast(),
        (&mut ans_seq as *mut u64).cast(),
        (&mut ans_ns as *mut u64).cast(),
        (&mut stop as *mut u64).cast(),
    ];
    // SAFETY: four device pointers, matching the kernel's four pointer parameters.
    unsafe { launch_raw(stream, func, LaunchDims::SINGLE, &mut params)? };
    let mut best: Option<(u64, i64, u64)> = None;
    let mut failure = None;
    for r in 1..=u64::from(rounds.max(1)) {
        let t0 = realtime_ns();
        word(0).store(r, Ordering::Release);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while word(1).load(Ordering::Acquire) != r {
            if std::time::Instant::now() > deadline {
                failure = Some(match stream_done(stream) {
                    Err(e) => e.into(),
                    _ => GpuError::Setup("the clock probe kernel did not answer within 2 s".into()),
                });
                break;
            }
            std::hint::spin_loop();
        }
        if failure.is_some() {
            break;
        }
        let t1 = realtime_ns();
        let gpu = word(2).load(Ordering::Acquire);
        let width = t1 - t0;
        let offset = (t0 + width / 2) as i64 - gpu as i64;
        if best.is_none_or(|(w, _, _)| width < w) {
            best = Some((width, offset, t0 + width / 2));
        }
    }
    word(3).store(1, Ordering::Release);
    stream_sync(stream)?;
    if let Some(e) = failure {
        return Err(e);
    }
    let (width, offset_ns, measured_at_ns) = best.expect("at least one round ran");
    Ok(ClockCalibration {
        offset_ns,
        error_ns: width.div_ceil(2),
        rounds: rounds.max(1),
        measured_at_ns,
        drift_ppb: 0,
    })
}

#[cfg(test)]
mod drift_tests {
    use super::ClockCalibration;

    fn at(measured_at_ns: u64, offset_ns: i64) -> ClockCalibration {
        ClockCalibration { offset_ns, measured_at_ns, error_ns: 1000, rounds: 200, drift_ppb: 0 }
    }

    #[test]
    fn drift_comes_from_the_previous_calibration() {
        // The offset grew 5 µs in 2 s: 2,500 ns per second.
        let c = at(3_000_000_000, 15_000).with_drift_since(&at(1_000_000_000, 10_000));
        assert_eq!(c.drift_ppb, 2_500);
        // Too close together, or no previous measurement: no drift claimed.
        assert_eq!(at(1_050_000_000, 11_000).with_drift_since(&at(1_000_000_000, 10_000)).drift_ppb, 0);
        assert_eq!(at(1_000_000_000, 10_000).with_drift_since(&ClockCalibration::default()).drift_ppb, 0);
    }
}
