//! Sub-frame streaming: a large frame's received part moves into GPU memory
//! while the rest is still on the wire, so that after its last packet only
//! the tail crosses the bus before the chain runs.
//!
//! The UDP reassembler stores, in the slot header of the frame it is
//! assembling, a received mark: the bytes of the run of packets received
//! from index 0 ([`crate::ring::layout::SlotHeader::received_mark`]; the
//! ingest layer knows nothing of the GPU). The resident graph becomes
//! `WHILE { pull ; handler ; IF(ready) { tail ; chain ; end } }`:
//! - `fl_stream_pull` (in front of the handler, every iteration) reads the
//!   mark of the frame after the last one claimed and copies what is new of
//!   it from the mapped slot into a staging buffer in device memory;
//! - `fl_stream_tail` (the frame's first node) copies what the pulls have
//!   not, `[pulled, len)` (the whole frame when the staging buffer holds
//!   another one), and points the FrameDesc at the staging buffer, so the
//!   chain reads device memory.
//!
//! The handler's poll budget is capped at [`STREAM_POLL_BUDGET_NS`] so that
//! pulls run while a frame arrives, and the poll ends sooner once the
//! frame's received mark has passed the pulled length (the pull leaves the
//! mark to watch in the loop state, `pull_watch_mark`): a pull runs as soon
//! as there is something to copy. The slot's completeness rules are the
//! reassembler's and do not change: an incomplete frame is published with
//! its flags and its missing ranges zeroed, all above the mark, and the tail
//! copies those from the published slot.
//!
//! A tiled kernel that claims its own frames (`WHILE { fl_fused_tiled_loop }`,
//! [`super::fused::tiled`]) runs neither node: one block of its grid pulls
//! beside block 0's poll, and its tiles read what is not pulled from the
//! slot. It shares the staging buffer and the pulls' state (`StreamBuffers`).

use super::GpuError;
use super::control::LoopParams;
use super::driver::{DeviceBuffer, GraphRef, LaunchDims, Node};
use super::runtime::GpuRuntime;
use crate::config::{FusedChainMode, LoopConfig, StreamToGpu};
use std::ffi::c_void;

/// Threads of every block of the two kernels (`FL_STREAM_THREADS`).
pub const STREAM_THREADS: u32 = 1024;
/// Blocks of `fl_stream_pull`.
pub const PULL_BLOCKS: u32 = 16;
/// Blocks of `fl_stream_tail`.
pub const TAIL_BLOCKS: u32 = 64;
/// The data-ready handler's poll budget while streaming (ns): a pull runs
/// at least this often while the loop waits for a frame.
pub const STREAM_POLL_BUDGET_NS: u64 = 20_000;
pub use crate::config::AUTO_MIN_SLOT_BYTES;
/// Bytes of `FlStreamState` (kernels/stream.cuh), rounded up.
const STATE_BYTES: usize = 64;
/// Offset of `FlStreamState::end_guard` (kernels/stream.cuh asserts the
/// struct's size, with the field last).
const END_GUARD_OFFSET: usize = 32;

/// Whether the loop streams, from `loop.stream_to_gpu`, the slot capacity
/// and whether the receiver reports progress (the native UDP reassembler);
/// an error names the key and the fix when "on" cannot be honoured.
pub fn decide(
    cfg: &LoopConfig,
    slot_bytes: usize,
    receiver_reports_progress: bool,
) -> Result<bool, GpuError> {
    match cfg.stream_to_gpu {
        StreamToGpu::Off => Ok(false),
        StreamToGpu::Auto => Ok(receiver_reports_progress
            && cfg.fused_chain != FusedChainMode::On
            && slot_bytes >= AUTO_MIN_SLOT_BYTES),
        StreamToGpu::On if !receiver_reports_progress => Err(GpuError::Setup(
            "loop.stream_to_gpu = \"on\" but the receiver does not report a frame's progress (only the native \
             UDP receiver does: ingest.transport = \"udp\", ingest.format = \"native\", no [rtp]); \
             set loop.stream_to_gpu to \"auto\" or \"off\""
                .into(),
        )),
        StreamToGpu::On if cfg.fused_chain == FusedChainMode::On => Err(GpuError::Setup(
            "loop.stream_to_gpu = \"on\" needs the chain as one kernel per operator but loop.fused_chain = \"on\"; \
             set one of them to \"auto\" or \"off\""
                .into(),
        )),
        StreamToGpu::On => Ok(true),
    }
}

/// The staging buffer and the pulls' state, owned by the executor.
pub(super) struct StreamBuffers {
    staging: DeviceBuffer,
    state: DeviceBuffer,
    /// 16-byte words the staging buffer holds.
    words: u32,
}

impl StreamBuffers {
    /// Device memory for frames of up to `capacity` bytes; the pulls leave
    /// the last `end_guard` bytes of a frame to the claim
    /// (`loop.pull_end_guard_bytes`).
    pub(super) fn new(rt: &GpuRuntime, capacity: usize, end_guard: u32) -> Result<Self, GpuError> {
        let bytes = capacity.max(1).next_multiple_of(16);
        let words = u32::try_from(bytes / 16)
            .map_err(|_| GpuError::Setup(format!("a {capacity}-byte slot is too large to stream")))?;
        let state = DeviceBuffer::new(&rt.ctx, STATE_BYTES, 0)?;
        state.write(END_GUARD_OFFSET, &u64::from(end_guard).to_ne_bytes())?;
        Ok(Self { staging: DeviceBuffer::new(&rt.ctx, bytes, 0)?, state, words })
    }

    /// Where the frames are staged, for an operator that reads them itself.
    pub(super) fn staged(&self) -> crate::fragment::StreamedFrame {
        crate::fragment::StreamedFrame {
            state: self.state.dptr(),
            staging: self.staging.dptr(),
            staging_words: self.words,
        }
    }

    /// Adds the `fl_stream_pull` node to the loop body, after `deps`.
    pub(super) fn add_pull(
        &self,
        rt: &GpuRuntime,
        body: GraphRef<'_>,
        deps: &[Node],
        params: LoopParams,
    ) -> Result<Node, GpuError> {
        let f = rt.library.function("fl_stream_pull")?;
        let (mut p, mut state, mut dst, mut words) =
            (params, self.state.dptr(), self.staging.dptr(), self.words);
        let mut args = [
            (&mut p as *mut LoopParams).cast::<c_void>(),
            (&mut state as *mut u64).cast::<c_void>(),
            (&mut dst as *mut u64).cast::<c_void>(),
            (&mut words as *mut u32).cast::<c_void>(),
        ];
        let dims = LaunchDims { grid: (PULL_BLOCKS, 1, 1), block: (STREAM_THREADS, 1, 1), shared_bytes: 0 };
        // SAFETY: (LoopParams, FlStreamState*, uint4*, uint32_t) is fl_stream_pull's
        // signature; the state is STATE_BYTES >= sizeof(FlStreamState) of device memory,
        // zeroed but for the host's end_guard, and the staging buffer `words` 16-byte
        // words, both kept as long as the graph.
        Ok(unsafe { body.add_kernel(deps, f, dims, &mut args) }?)
    }

    /// Adds the `fl_stream_tail` node to the frame's body, after `deps`;
    /// `frame_desc` is the device address of the loop's FrameDesc.
    pub(super) fn add_tail(
        &self,
        rt: &GpuRuntime,
        body: GraphRef<'_>,
        deps: &[Node],
        frame_desc: u64,
    ) -> Result<Node, GpuError> {
        let f = rt.library.function("fl_stream_tail")?;
        let (mut fd, mut state, mut dst, mut words) =
            (frame_desc, self.state.dptr(), self.staging.dptr(), self.words);
        let mut args = [
            (&mut fd as *mut u64).cast::<c_void>(),
            (&mut state as *mut u64).cast::<c_void>(),
            (&mut dst as *mut u64).cast::<c_void>(),
            (&mut words as *mut u32).cast::<c_void>(),
        ];
        let dims = LaunchDims { grid: (TAIL_BLOCKS, 1, 1), block: (STREAM_THREADS, 1, 1), shared_bytes: 0 };
        // SAFETY: (FrameDesc*, const FlStreamState*, uint4*, uint32_t) is fl_stream_tail's
        // signature; it writes at most `words` words of the staging buffer and one word of
        // the FrameDesc, all kept as long as the graph.
        Ok(unsafe { body.add_kernel(deps, f, dims, &mut args) }?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(stream: StreamToGpu, fused: FusedChainMode) -> LoopConfig {
        LoopConfig { stream_to_gpu: stream, fused_chain: fused, ..LoopConfig::default() }
    }

    #[test]
    fn auto_streams_large_slots_of_a_receiver_that_reports_progress() {
        let auto = cfg(StreamToGpu::Auto, FusedChainMode::Auto);
        assert!(decide(&auto, AUTO_MIN_SLOT_BYTES, true).unwrap());
        assert!(!decide(&auto, AUTO_MIN_SLOT_BYTES - 1, true).unwrap());
        assert!(!decide(&auto, 8 << 20, false).unwrap());
        let off = cfg(StreamToGpu::Off, FusedChainMode::Auto);
        assert!(!decide(&off, 8 << 20, true).unwrap());
        let on = cfg(StreamToGpu::On, FusedChainMode::Off);
        assert!(decide(&on, 8192, true).unwrap());
        let fused = cfg(StreamToGpu::Auto, FusedChainMode::On);
        assert!(!decide(&fused, 8 << 20, true).unwrap(), "a fused chain asked for keeps its place");
    }

    #[test]
    fn on_fails_with_the_key_and_the_fix_when_it_cannot_stream() {
        let on = cfg(StreamToGpu::On, FusedChainMode::Auto);
        let e = decide(&on, 8 << 20, false).unwrap_err().to_string();
        assert!(e.contains("loop.stream_to_gpu") && e.contains("ingest.transport"), "{e}");
        let fused = cfg(StreamToGpu::On, FusedChainMode::On);
        let e = decide(&fused, 8 << 20, true).unwrap_err().to_string();
        assert!(e.contains("loop.fused_chain"), "{e}");
    }

    #[test]
    fn the_config_key_parses_and_validates() {
        let c = crate::config::parse("[loop]\nstream_to_gpu = \"on\"\n").unwrap();
        assert_eq!(c.loop_.stream_to_gpu, StreamToGpu::On);
        let e = crate::config::parse("[loop]\nstream_to_gpu = \"yes\"\n").unwrap_err().to_string();
        assert!(e.contains("stream_to_gpu"), "{e}");
        let mut problems = Vec::new();
        cfg(StreamToGpu::On, FusedChainMode::On).validate(&mut problems);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().contains("loop.stream_to_gpu"));
        problems.clear();
        cfg(StreamToGpu::Auto, FusedChainMode::On).validate(&mut problems);
        assert!(problems.is_empty());
    }
}
