//! Rings in mapped memory that the host publishes frames into as the UDP
//! receiver would (whole, or streamed part by part), the deterministic
//! frames it publishes, and the phase marks the tiled kernel writes when
//! built with `FL_TILED_PHASES`: support for the GPU integration tests, the
//! examples and `frameloop bench --compare`, not part of the API.

use super::{GpuError, GpuRuntime, MappedMemory};
use crate::clock::{monotonic_ns, realtime_ns};
use crate::ring::layout::{SlotHeader, received_mark, result_ring_bytes, ring_bytes};
use crate::ring::{FrameRing, OverrunPolicy, ResultRing, RingWriter};
use std::sync::Arc;

/// One word of the user result words the claiming tiled kernel fills when
/// built with `FL_TILED_PHASES` (kernels/fused_tiled.cu).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PhaseMark {
    /// The user result word.
    pub word: usize,
    /// What the report calls it.
    pub name: &'static str,
    /// The kernel's `#define` of the word (checked against it by
    /// tests/gpu_kernels_compile.rs).
    pub define: &'static str,
}

const fn mark(word: usize, name: &'static str, define: &'static str) -> PhaseMark {
    PhaseMark { word, name, define }
}

/// The claiming tiled kernel's phase marks, in the order a frame passes them:
/// nanoseconds after detection.
pub const PHASE_MARKS: [PhaseMark; 9] = [
    mark(0, "started", "FL_MARK_STARTED"),
    mark(1, "prologue", "FL_MARK_PROLOGUE"),
    mark(7, "bytes ready", "FL_MARK_BYTES_READY"),
    mark(2, "first step", "FL_MARK_FIRST_STEP"),
    mark(8, "second step", "FL_MARK_SECOND_STEP"),
    mark(9, "third step", "FL_MARK_THIRD_STEP"),
    mark(3, "tiles done", "FL_MARK_TILES"),
    mark(4, "combined", "FL_MARK_COMBINED"),
    mark(5, "released", "FL_MARK_RELEASED"),
];

/// The bytes a frame's tiles read from the slot after the claim.
pub const SLOT_BYTES_MARK: PhaseMark = mark(6, "read from the slot", "FL_MARK_SLOT_BYTES");

/// Block 0's SM clock over its share of the frame, MHz.
pub const SM_CLOCK_MARK: PhaseMark = mark(10, "SM clock", "FL_MARK_SM_CLOCK_MHZ");

/// Deterministic xorshift64* generator: the same frames (and, in `bench
/// --compare`, the same gaps) for every run.
pub struct Rng(pub u64);

impl Rng {
    /// The next word.
    pub fn next_word(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Fills a frame payload from the generator (u16 samples spread over 0..65535).
pub fn fill_frame(rng_seed: u64, frame: u64, out: &mut [u8]) {
    FrameFill::new(rng_seed, frame).fill(out);
}

/// The generator of one frame's payload, written in consecutive parts of
/// any lengths: the bytes are those of one fill of the whole payload.
struct FrameFill {
    rng: Rng,
    /// The last word generated, of which the first `8 - left` bytes were written.
    word: [u8; 8],
    left: usize,
}

impl FrameFill {
    fn new(rng_seed: u64, frame: u64) -> Self {
        Self { rng: Rng(rng_seed ^ frame.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1), word: [0; 8], left: 0 }
    }

    /// Writes the next `out.len()` bytes of the payload.
    fn fill(&mut self, out: &mut [u8]) {
        let carried = self.left.min(out.len());
        out[..carried].copy_from_slice(&self.word[8 - self.left..8 - self.left + carried]);
        self.left -= carried;
        for chunk in out[carried..].chunks_mut(8) {
            self.word = self.rng.next_word().to_le_bytes();
            chunk.copy_from_slice(&self.word[..chunk.len()]);
            self.left = 8 - chunk.len();
        }
    }
}

/// Bytes the streamed publisher writes between two received marks by
/// default: about what one receive batch of the UDP receiver holds (a GRO
/// buffer).
pub const STREAMED_PART_BYTES: usize = 64 * 1024;

/// A frame ring and a result ring in GPU-mapped host memory, as one resident loop uses them.
pub struct MappedRings {
    /// The frame ring the host publishes into and the GPU reads.
    pub frames: Arc<FrameRing>,
    /// The result ring the GPU writes and the host reads.
    pub results: Arc<ResultRing>,
}

impl MappedRings {
    /// Both rings in `cuMemHostAlloc` memory.
    pub fn new(
        rt: &GpuRuntime,
        slots: usize,
        frame_bytes: usize,
        results: usize,
        policy: OverrunPolicy,
    ) -> Result<Self, GpuError> {
        Self::with_frame_memory(rt, slots, frame_bytes, results, policy, |len| rt.mapped(len))
    }

    /// As [`MappedRings::new`], the frame ring's memory allocated as the
    /// appliance allocates it: ring pages registered with the GPU, in huge
    /// pages when `huge_pages`.
    pub fn like_the_appliance(
        rt: &GpuRuntime,
        slots: usize,
        frame_bytes: usize,
        results: usize,
        policy: OverrunPolicy,
        huge_pages: bool,
    ) -> Result<Self, GpuError> {
        Self::with_frame_memory(rt, slots, frame_bytes, results, policy, |len| {
            rt.mapped_ring(len, huge_pages)
        })
    }

    fn with_frame_memory(
        rt: &GpuRuntime,
        slots: usize,
        frame_bytes: usize,
        results: usize,
        policy: OverrunPolicy,
        frame_memory: impl FnOnce(usize) -> Result<MappedMemory, GpuError>,
    ) -> Result<Self, GpuError> {
        let too_large =
            |what: &str| GpuError::Setup(format!("the {what} ring's size overflows; make it smaller"));
        let fmem = frame_memory(ring_bytes(slots, frame_bytes).ok_or_else(|| too_large("frame"))?)?;
        let frames = FrameRing::new(Box::new(fmem), slots, frame_bytes, policy)
            .map_err(|e| GpuError::Setup(e.to_string()))?;
        let rmem = rt.mapped(result_ring_bytes(results).ok_or_else(|| too_large("result"))?)?;
        let results = ResultRing::new(Box::new(rmem), results).map_err(|e| GpuError::Setup(e.to_string()))?;
        Ok(Self { frames, results })
    }
}

/// Publishes one frame: payload from the generator, header, head release. Returns the publish time.
pub fn publish(w: &mut RingWriter, seed: u64, index: u64, len: usize) -> Result<(u64, u64), GpuError> {
    let seq = w.reserve().map_err(|e| GpuError::Setup(e.to_string()))?;
    fill_frame(seed, index, &mut w.payload_mut(seq)[..len]);
    publish_filled(w, seq, index, len, 0)
}

/// Publishes one frame as the UDP receiver does while it streams: the
/// payload written `part_bytes` at a time (one receive batch, e.g.
/// [`STREAMED_PART_BYTES`]), the slot's received mark advanced
/// after each part (so the loop's pulls may move it into device memory
/// before the frame is published), then the header and the head release.
/// The same bytes as [`publish`]; returns the publish time.
pub fn publish_streamed(
    w: &mut RingWriter,
    seed: u64,
    index: u64,
    len: usize,
    part_bytes: usize,
) -> Result<(u64, u64), GpuError> {
    if part_bytes == 0 {
        return Err(GpuError::Setup(
            "a streamed part of 0 bytes never ends the frame; give at least 1".into(),
        ));
    }
    let seq = w.reserve().map_err(|e| GpuError::Setup(e.to_string()))?;
    let mut fill = FrameFill::new(seed, index);
    let too_long = || GpuError::Setup(format!("a {len}-byte frame is too long to stream"));
    let mut written = 0;
    while written < len {
        let end = (written + part_bytes).min(len);
        fill.fill(&mut w.payload_mut(seq)[written..end]);
        w.mark_received(seq, u32::try_from(end).map_err(|_| too_long())?);
        written = end;
    }
    let mark = received_mark(seq, u32::try_from(len).map_err(|_| too_long())?);
    publish_filled(w, seq, index, len, mark)
}

/// The header (with the final received `mark`, 0 when none was stored) and
/// head release of a frame whose payload is written.
fn publish_filled(
    w: &mut RingWriter,
    seq: u64,
    index: u64,
    len: usize,
    mark: u64,
) -> Result<(u64, u64), GpuError> {
    let header = SlotHeader {
        frame_seq: index,
        payload_len: len as u32,
        received_mark: mark,
        published_ns: realtime_ns(),
        ..Default::default()
    };
    let t0 = monotonic_ns();
    w.publish(seq, &header);
    Ok((seq, t0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_streamed_frame_has_the_bytes_of_a_whole_one_and_its_full_mark() {
        use crate::ring::HostMemory;
        let len = 3 * STREAMED_PART_BYTES + 4099;
        let ring = FrameRing::new(
            Box::new(HostMemory::new(ring_bytes(2, len).unwrap()).unwrap()),
            2,
            len,
            OverrunPolicy::Every,
        )
        .unwrap();
        let mut w = ring.writer().unwrap();
        let mut r = ring.reader().unwrap();
        publish(&mut w, 7, 11, len).unwrap();
        let whole = r.claim().unwrap();
        assert_eq!(whole.header.received_mark, 0);
        let whole_bytes = whole.payload[..len].to_vec();
        r.finish(1);
        // Parts shorter than the generator's word, of one word, of a
        // datagram's payload (not a whole number of words), of a GRO buffer,
        // and longer than the frame.
        for (k, part) in [3, 8, 8924, STREAMED_PART_BYTES, len + 8].into_iter().enumerate() {
            let seq = 2 + k as u64;
            publish_streamed(&mut w, 7, 11, len, part).unwrap();
            let streamed = r.claim().unwrap();
            assert_eq!(streamed.header.received_mark, received_mark(seq, len as u32), "parts of {part}");
            assert_eq!(streamed.header.payload_len as usize, len);
            assert!(
                streamed.payload[..len] == whole_bytes[..],
                "the same generator bytes in parts of {part}"
            );
            r.finish(seq);
        }
        let err = publish_streamed(&mut w, 7, 11, len, 0).unwrap_err().to_string();
        assert!(err.contains("at least 1"), "{err}");
    }
}
