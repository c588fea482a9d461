//! Bandwidth floors of a comparison run: what moving a frame's bytes costs on
//! this machine at best (host-to-device copies over its PCIe link, device
//! memory), measured in the same `bench --compare` run as the modes, and
//! each mode's time as a multiple of the floor its chain's bytes set.
//!
//! A chain's GPU floor is its payload at the host-to-device link rate (every
//! byte of the frame crosses the bus once, by zero-copy reads or a copy)
//! plus its operators' traffic at the device memory rate (each operator
//! reads its input and writes its output once; a stats next to a threshold
//! read the samples once). Its end-to-end floor adds the persistent-kernel
//! round trip (the host's publish seen by the GPU, the result seen by the
//! host).
//!
//! The link rate is measured on host memory written long before. A frame
//! the host (or the kernel's receive path) has just written is still in the
//! CPU's cache, and the GPU reads it more slowly, by zero-copy loads and by
//! the copy engine alike; [`Floors::fresh_frame_copy_us`] measures that case
//! too, so a frame published as soon as it is written can be held against
//! both.

use std::sync::Arc;

use cudarc::driver::sys;
use cudarc::driver::{CudaContext, CudaStream};
use serde::Serialize;

use frameloop::cuda::DeviceBuffer;
use frameloop::cuda::copy::{memcpy_dtod_async, memcpy_htod_async};
use frameloop::gpu::{GpuError, MappedMemory};
use frameloop::ops::OpSpec;
use frameloop::ring::RingMemory;

/// Bytes of each copy that measures the link rate: large enough that the
/// per-copy overhead is noise.
const LINK_COPY_BYTES: usize = 64 << 20;
/// Bytes of the device-to-device copy that measures device memory: well past
/// the largest L2 (60 MB on an H200), so the copy runs from and to DRAM.
const DEVICE_COPY_BYTES: usize = 256 << 20;
/// Copies of each timed batch (after one untimed).
const LINK_COPIES: usize = 8;
const DEVICE_COPIES: usize = 10;
/// Frame-sized copies are timed in a batch of about this many bytes (at
/// least [`MIN_FRAME_COPIES`] copies): the per-copy time of a stream of them.
const FRAME_COPY_BATCH_BYTES: usize = 256 << 20;
const MIN_FRAME_COPIES: usize = 100;
const MAX_FRAME_COPIES: usize = 10_000;
/// Frame-sized copies of freshly written host memory, timed one by one (the median).
const FRESH_COPIES: usize = 21;

/// What this machine's bytes cost at best, measured.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Floors {
    /// Pinned host memory to device memory over the link, bytes per second
    /// (copies of `LINK_COPY_BYTES`).
    pub host_to_device_bytes_per_s: f64,
    /// One frame-sized pinned host-to-device copy in a stream of them, µs.
    pub frame_copy_us: f64,
    /// One frame-sized copy of host memory the host wrote just before, by
    /// itself, median, µs: what a frame published as soon as it is written
    /// costs to move at best.
    pub fresh_frame_copy_us: f64,
    /// Device memory, bytes read plus bytes written per second
    /// (a device-to-device copy of `DEVICE_COPY_BYTES`).
    pub device_bytes_per_s: f64,
    /// The persistent-kernel round trip, p50, µs.
    pub round_trip_p50_us: f64,
}

/// The bytes a chain has to move for one frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ChainBytes {
    /// Payload bytes that cross the host-to-device link.
    pub host_to_device: usize,
    /// Bytes the operators read and write in device memory.
    pub device: usize,
}

/// One mode's times as multiples of its chain's floors.
#[derive(Debug, Clone, Serialize)]
pub struct FloorMultiple {
    pub mode: String,
    /// GPU time (detection to published result) p50 over [`Floors::gpu_floor_us`].
    pub gpu_p50: Option<f64>,
    /// Publish to result seen, p50, over [`Floors::end_to_end_floor_us`].
    pub p50: f64,
}

/// The bytes `chain` moves for a frame of `frame_bytes`: the payload over the
/// link, then 4-byte samples through each operator (see the module doc).
pub fn chain_bytes(chain: &[OpSpec], frame_bytes: usize) -> ChainBytes {
    let samples = match chain.first() {
        Some(OpSpec::Unpack { format, .. }) => format.samples_in(frame_bytes),
        _ => 0,
    };
    let buffer = samples.saturating_mul(4);
    let mut device = 0usize;
    let mut previous: Option<&OpSpec> = None;
    for op in chain {
        let traffic = match (op, previous) {
            (OpSpec::Unpack { .. }, _) => buffer,
            // A stats next to a threshold is one pass over the samples.
            (OpSpec::Stats, Some(OpSpec::Threshold { .. }))
            | (OpSpec::Threshold { .. }, Some(OpSpec::Stats)) => 0,
            (OpSpec::Stats | OpSpec::Threshold { .. }, _) => buffer,
            (OpSpec::Delay { .. }, _) => 0,
            (OpSpec::Fir { .. } | OpSpec::Filter2d { .. } | OpSpec::Fft(_) | OpSpec::Kernel(_), _) => {
                buffer.saturating_mul(2)
            }
        };
        device = device.saturating_add(traffic);
        previous = Some(op);
    }
    ChainBytes { host_to_device: if chain.is_empty() { 0 } else { frame_bytes }, device }
}

impl Floors {
    /// The least GPU time `bytes` need: the payload at the link rate plus the
    /// operators' traffic at the device memory rate, µs.
    pub fn gpu_floor_us(&self, bytes: ChainBytes) -> f64 {
        let link = bytes.host_to_device as f64 / self.host_to_device_bytes_per_s;
        let device = bytes.device as f64 / self.device_bytes_per_s;
        (link + device) * 1e6
    }

    /// The GPU floor plus one round trip, µs.
    pub fn end_to_end_floor_us(&self, bytes: ChainBytes) -> f64 {
        self.gpu_floor_us(bytes) + self.round_trip_p50_us
    }

    /// The chain's device-memory traffic at the device rate plus one round
    /// trip, µs: what the GPU time of a chain whose frame were already in
    /// device memory would need (the large-frame target allows 3x of it).
    pub fn device_round_trip_floor_us(&self, bytes: ChainBytes) -> f64 {
        bytes.device as f64 / self.device_bytes_per_s * 1e6 + self.round_trip_p50_us
    }

    /// The payload at the host-to-device rate plus one round trip, µs: what
    /// publish to result needs at least when the frame crosses the link after
    /// it is published (the large-frame target allows 1.3x of it).
    pub fn link_round_trip_floor_us(&self, bytes: ChainBytes) -> f64 {
        bytes.host_to_device as f64 / self.host_to_device_bytes_per_s * 1e6 + self.round_trip_p50_us
    }

    /// A frame copied right after the host wrote it, plus one round trip, µs
    /// (0 for a chain that moves no payload).
    pub fn fresh_round_trip_floor_us(&self, bytes: ChainBytes) -> f64 {
        match bytes.host_to_device {
            0 => 0.0,
            _ => self.fresh_frame_copy_us + self.round_trip_p50_us,
        }
    }

    /// `mode`'s p50 times as multiples of the floors of `bytes`.
    pub fn multiple(
        &self,
        mode: &str,
        p50_us: f64,
        gpu_p50_us: Option<f64>,
        bytes: ChainBytes,
    ) -> FloorMultiple {
        let gpu_floor = self.gpu_floor_us(bytes);
        FloorMultiple {
            mode: mode.to_owned(),
            gpu_p50: gpu_p50_us.filter(|_| gpu_floor > 0.0).map(|g| g / gpu_floor),
            p50: p50_us / self.end_to_end_floor_us(bytes),
        }
    }

    /// The floor rows of the comparison table.
    pub fn rows(&self, bytes: ChainBytes, multiples: &[FloorMultiple]) -> Vec<String> {
        let gb = |b: f64| b / 1e9;
        let mut rows = vec![
            format!(
                "floor: host→device copy {:.1} GB/s ({} MiB copies); a {} B frame: {:.2} µs at that rate, \
                 {:.2} µs per copy in a stream of them",
                gb(self.host_to_device_bytes_per_s),
                LINK_COPY_BYTES >> 20,
                bytes.host_to_device,
                bytes.host_to_device as f64 / self.host_to_device_bytes_per_s * 1e6,
                self.frame_copy_us
            ),
            format!(
                "floor: the frame copied right after the host wrote it (still in the CPU's cache): {:.2} µs \
                 ({:.1} GB/s), {:.2}x the copy of a frame written long before",
                self.fresh_frame_copy_us,
                gb(bytes.host_to_device as f64 / (self.fresh_frame_copy_us * 1e-6)),
                self.fresh_frame_copy_us / self.frame_copy_us.max(f64::MIN_POSITIVE)
            ),
            format!(
                "floor: device memory {:.0} GB/s read + write ({} MiB device-to-device copy); the chain's {} B: \
                 {:.2} µs",
                gb(self.device_bytes_per_s),
                DEVICE_COPY_BYTES >> 20,
                bytes.device,
                bytes.device as f64 / self.device_bytes_per_s * 1e6
            ),
            format!(
                "floor: the chain's bytes {:.2} µs on the GPU, {:.2} µs end to end with the {:.2} µs round trip",
                self.gpu_floor_us(bytes),
                self.end_to_end_floor_us(bytes),
                self.round_trip_p50_us
            ),
        ];
        for m in multiples {
            rows.push(format!(
                "x floor {:<38} gpu p50 {:>7} | p50 {:>6.2}x",
                m.mode,
                m.gpu_p50.map_or("-".into(), |g| format!("{g:.2}x")),
                m.p50
            ));
        }
        rows
    }
}

/// Measures the floors on `ctx`'s device for frames of `frame_bytes`; the
/// round trip comes from the run's own floor mode. Allocates about 600 MiB
/// of device memory and 64 MiB of pinned host memory for the duration.
pub fn measure(
    ctx: &Arc<CudaContext>,
    frame_bytes: usize,
    round_trip_p50_us: f64,
) -> Result<Floors, GpuError> {
    ctx.bind_to_thread()?;
    let stream = ctx.new_stream()?;
    let host = MappedMemory::alloc(ctx, LINK_COPY_BYTES.max(frame_bytes))?;
    let link_dst = DeviceBuffer::new(ctx, LINK_COPY_BYTES.max(frame_bytes), 0)?;
    let copy_link = |len: usize| {
        // SAFETY: `host` and `link_dst` each hold at least LINK_COPY_BYTES.max(frame_bytes) >= len
        // bytes and outlive the stream's synchronisation in `timed`; `host` is page-locked.
        unsafe { htod_async(link_dst.dptr(), host.host_ptr(), len, &stream) }
    };
    let link_s = timed(ctx, &stream, LINK_COPIES, || copy_link(LINK_COPY_BYTES))?;
    let frame_copies =
        (FRAME_COPY_BATCH_BYTES / frame_bytes.max(1)).clamp(MIN_FRAME_COPIES, MAX_FRAME_COPIES);
    let frame_s = timed(ctx, &stream, frame_copies, || copy_link(frame_bytes))?;
    let fresh_us = fresh_copy_median_us(ctx, &stream, &host, link_dst.dptr(), frame_bytes)?;
    drop(link_dst);

    let (from, to) =
        (DeviceBuffer::new(ctx, DEVICE_COPY_BYTES, 0)?, DeviceBuffer::new(ctx, DEVICE_COPY_BYTES, 0)?);
    let device_s = timed(ctx, &stream, DEVICE_COPIES, || {
        // SAFETY: both buffers hold DEVICE_COPY_BYTES and outlive the synchronisation in `timed`.
        unsafe { dtod_async(to.dptr(), from.dptr(), DEVICE_COPY_BYTES, &stream) }
    })?;
    Ok(Floors {
        host_to_device_bytes_per_s: (LINK_COPIES * LINK_COPY_BYTES) as f64 / link_s,
        frame_copy_us: frame_s / frame_copies as f64 * 1e6,
        fresh_frame_copy_us: fresh_us,
        device_bytes_per_s: (2 * DEVICE_COPIES * DEVICE_COPY_BYTES) as f64 / device_s,
        round_trip_p50_us,
    })
}

/// The median time of [`FRESH_COPIES`] copies of `frame_bytes` from `host`
/// to `dst`, each of a region the host has written just before (a different
/// region each time, none of them copied before), µs.
fn fresh_copy_median_us(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    host: &MappedMemory,
    dst: u64,
    frame_bytes: usize,
) -> Result<f64, GpuError> {
    let len = host.len();
    debug_assert!(frame_bytes <= len);
    let pattern: Vec<u8> = (0..frame_bytes).map(|i| (i * 7 + 3) as u8).collect();
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let (start, end) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
    let mut times = Vec::with_capacity(FRESH_COPIES);
    for i in 0..FRESH_COPIES {
        let offset = match len - frame_bytes {
            0 => 0,
            room => ((i * frame_bytes.next_multiple_of(4096)) % room) & !4095,
        };
        stream.synchronize()?;
        // SAFETY: `host` holds `len` >= offset + frame_bytes bytes (offset <= len -
        // frame_bytes) and nothing else reads or writes them now: every copy queued
        // before was waited for just above.
        let region = unsafe { std::slice::from_raw_parts_mut(host.host_ptr().add(offset), frame_bytes) };
        region.copy_from_slice(&pattern);
        start.record(stream)?;
        // SAFETY: the region lies in page-locked `host`, `dst` holds at least
        // frame_bytes (the caller's buffer), and the stream is waited for below.
        unsafe { htod_async(dst, region.as_ptr(), frame_bytes, stream) }?;
        end.record(stream)?;
        end.synchronize()?;
        times.push(f64::from(start.elapsed_ms(&end)?) * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Seconds `count` calls of `enqueue` take on `stream`, by events around
/// them, after one untimed call.
fn timed(
    ctx: &Arc<CudaContext>,
    stream: &Arc<CudaStream>,
    count: usize,
    mut enqueue: impl FnMut() -> Result<(), GpuError>,
) -> Result<f64, GpuError> {
    enqueue()?;
    let timing = Some(sys::CUevent_flags::CU_EVENT_DEFAULT);
    let (start, end) = (ctx.new_event(timing)?, ctx.new_event(timing)?);
    start.record(stream)?;
    for _ in 0..count {
        enqueue()?;
    }
    end.record(stream)?;
    end.synchronize()?;
    let ms = start.elapsed_ms(&end)?;
    if ms <= 0.0 {
        return Err(GpuError::Setup(format!(
            "{count} timed copies took {ms} ms; the event timer is not usable"
        )));
    }
    Ok(ms as f64 / 1e3)
}

/// Queues a copy of `len` bytes from page-locked host memory to the device.
///
/// # Safety
/// `src` is page-locked and valid for `len` bytes, `dst..dst + len` lies in a
/// live device allocation, and both stay so until the stream is synchronised.
unsafe fn htod_async(dst: u64, src: *const u8, len: usize, stream: &CudaStream) -> Result<(), GpuError> {
    // SAFETY: the caller guarantees both ranges; the stream is live (borrowed).
    Ok(unsafe { memcpy_htod_async(dst, src, len, stream.cu_stream()) }?)
}

/// Queues a device-to-device copy of `len` bytes.
///
/// # Safety
/// Both ranges lie in live device allocations that stay so until the stream
/// is synchronised.
unsafe fn dtod_async(dst: u64, src: u64, len: usize, stream: &CudaStream) -> Result<(), GpuError> {
    // SAFETY: the caller guarantees both ranges; the stream is live (borrowed).
    Ok(unsafe { memcpy_dtod_async(dst, src, len, stream.cu_stream()) }?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use frameloop::ops::{SampleFormat, default_chain};

    fn floors() -> Floors {
        Floors {
            host_to_device_bytes_per_s: 50e9,
            frame_copy_us: 3.0,
            fresh_frame_copy_us: 4.5,
            device_bytes_per_s: 4e12,
            round_trip_p50_us: 4.0,
        }
    }

    #[test]
    fn chain_bytes_count_the_payload_once_and_each_operator_pass() {
        // Default chain on 2 MiB: unpack u16 writes 1 Mi floats, the FIR reads and writes them,
        // stats + threshold read them once.
        let mib2 = 2 << 20;
        assert!(matches!(default_chain()[0], OpSpec::Unpack { format: SampleFormat::U16, .. }));
        let b = chain_bytes(&default_chain(), mib2);
        assert_eq!(b, ChainBytes { host_to_device: mib2, device: (1 << 20) * 4 * 4 });
        // Apart, stats and threshold are two passes; a delay moves nothing.
        let unpack = OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 };
        let apart =
            [unpack.clone(), OpSpec::Stats, OpSpec::Delay { us: 1 }, OpSpec::Threshold { level: 0.0 }];
        assert_eq!(chain_bytes(&apart, 1000).device, 3 * 4000);
        assert_eq!(chain_bytes(&[], 1000), ChainBytes { host_to_device: 0, device: 0 });
    }

    #[test]
    fn floors_add_the_link_the_device_and_the_round_trip() {
        let f = floors();
        let bytes = ChainBytes { host_to_device: 1_000_000, device: 8_000_000 };
        // 20 µs over the link, 2 µs in device memory.
        assert!((f.gpu_floor_us(bytes) - 22.0).abs() < 1e-9);
        assert!((f.end_to_end_floor_us(bytes) - 26.0).abs() < 1e-9);
        // The large-frame targets' floors: device traffic or the link, each plus the 4 µs round trip.
        assert!((f.device_round_trip_floor_us(bytes) - 6.0).abs() < 1e-9);
        assert!((f.link_round_trip_floor_us(bytes) - 24.0).abs() < 1e-9);
        assert!((f.fresh_round_trip_floor_us(bytes) - 8.5).abs() < 1e-9);
        assert_eq!(f.fresh_round_trip_floor_us(ChainBytes { host_to_device: 0, device: 8 }), 0.0);
        let m = f.multiple("resident", 52.0, Some(44.0), bytes);
        assert!((m.gpu_p50.unwrap() - 2.0).abs() < 1e-9);
        assert!((m.p50 - 2.0).abs() < 1e-9);
        // No GPU time, or nothing to move: no GPU multiple.
        assert_eq!(f.multiple("m", 5.0, None, bytes).gpu_p50, None);
        assert_eq!(
            f.multiple("m", 5.0, Some(3.0), ChainBytes { host_to_device: 0, device: 0 }).gpu_p50,
            None
        );
        let rows = f.rows(bytes, &[m]);
        assert!(rows[0].contains("50.0 GB/s") && rows[0].contains("20.00 µs"), "{}", rows[0]);
        assert!(rows[1].contains("4.50 µs") && rows[1].contains("1.50x"), "{}", rows[1]);
        assert!(rows[2].contains("4000 GB/s") && rows[2].contains("2.00 µs"), "{}", rows[2]);
        assert!(rows[4].contains("resident") && rows[4].contains("2.00x"), "{}", rows[4]);
    }
}
