//! Run control of the resident loop: the control block in mapped memory,
//! the loop state and the loop parameters' copy in device memory, and the
//! stream the graph runs on. [`RunControl`] resets them for a launch (or a
//! relaunch after a live chain swap), watches the stream for the loop's end
//! or fault, names the stage a fault happened in, and tears the loop down
//! within a bound.

use super::options::{ExecutorOptions, LaunchStyle};
use crate::backend::LoopStats;
use crate::gpu::GpuError;
use crate::gpu::control::*;
use crate::gpu::driver::{self, DeviceBuffer, GraphExec};
use crate::gpu::mapped::MappedMemory;
use crate::ring::{FrameRing, ResultWriter};
use cudarc::driver::{CudaContext, CudaStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// What the loop state says of the loop's actuation outputs
/// (`DeviceLoopState::tx`, `act_samples`, `act_capacity`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ActuationFields {
    /// Device address of the former's state, 0 without outputs.
    pub(super) tx: u64,
    /// Device address of the chain's final samples (0: none) and the
    /// floats that buffer holds.
    pub(super) samples: u64,
    pub(super) capacity: u32,
}

/// What the host uses to run and watch the loop.
pub(super) struct RunControl {
    control: MappedMemory,
    state: DeviceBuffer,
    /// `params` in device memory, for kernels that publish the result.
    params_dev: DeviceBuffer,
    frame_ring: Arc<FrameRing>,
    /// The result ring's single writer, held while the device writes the ring
    /// so that nothing on the host can push into it.
    result_writer: ResultWriter,
    run_stream: Arc<CudaStream>,
    launched: bool,
    /// The terminal outcome once the loop stopped (by tear-down, timeout or fault).
    finished: Option<Result<(), Arc<GpuError>>>,
    /// Set when a tear-down timed out or a fault was seen: the device may
    /// still touch the executor's memory, and freeing it may block.
    wedged: AtomicBool,
}

impl RunControl {
    /// Allocates the control block, the loop state and the parameters' copy,
    /// and the run stream.
    pub(super) fn new(
        ctx: &Arc<CudaContext>,
        frame_ring: Arc<FrameRing>,
        result_writer: ResultWriter,
    ) -> Result<Self, GpuError> {
        let control = MappedMemory::alloc(ctx, std::mem::size_of::<LoopControl>())?;
        let state = DeviceBuffer::new(ctx, std::mem::size_of::<DeviceLoopState>(), 0)?;
        let params_dev = DeviceBuffer::new(ctx, std::mem::size_of::<LoopParams>(), 0)?;
        let run_stream = ctx.new_stream()?;
        Ok(Self {
            control,
            state,
            params_dev,
            frame_ring,
            result_writer,
            run_stream,
            launched: false,
            finished: None,
            wedged: AtomicBool::new(false),
        })
    }

    /// Device address of the control block.
    pub(super) fn control_dptr(&self) -> u64 {
        self.control.dptr()
    }

    /// Device address of the loop state ([`DeviceLoopState`]).
    pub(super) fn state_dptr(&self) -> u64 {
        self.state.dptr()
    }

    /// Device address of the loop parameters' copy.
    pub(super) fn params_dev_dptr(&self) -> u64 {
        self.params_dev.dptr()
    }

    /// The frame ring the loop reads.
    pub(super) fn frame_ring(&self) -> &FrameRing {
        &self.frame_ring
    }

    /// The stream the graph (or the per-frame work) runs on.
    pub(super) fn stream(&self) -> &Arc<CudaStream> {
        &self.run_stream
    }

    pub(super) fn control(&self) -> &LoopControl {
        // SAFETY: the mapping holds a zero-initialised LoopControl (all-zero
        // atomics are valid), 64-byte aligned, alive as long as `self`.
        unsafe { &*(self.control.host_ptr() as *const LoopControl) }
    }

    /// Whether the loop was launched and not yet seen to stop (no stream query).
    pub(super) fn launched(&self) -> bool {
        self.launched
    }

    /// Records that the loop runs (after a launch or a relaunch).
    pub(super) fn mark_launched(&mut self) {
        self.launched = true;
    }

    /// The terminal outcome, once the loop stopped.
    pub(super) fn finished(&self) -> Option<&Result<(), Arc<GpuError>>> {
        self.finished.as_ref()
    }

    /// Whether the loop is launched and its stream still busy.
    pub(super) fn is_running(&self) -> bool {
        self.launched && driver::stream_done(&self.run_stream).is_ok_and(|done| !done)
    }

    /// Writes the loop parameters to their device copy, which the graph's
    /// kernels read (before a launch or a relaunch).
    pub(super) fn upload_params(&self, params: &LoopParams) -> Result<(), GpuError> {
        // SAFETY: LoopParams is plain old data (integers only, no padding).
        let params = unsafe {
            std::slice::from_raw_parts(
                (params as *const LoopParams).cast::<u8>(),
                std::mem::size_of::<LoopParams>(),
            )
        };
        Ok(self.params_dev.write(0, params)?)
    }

    /// Before a launch: resets the control block and the loop state (the
    /// handler starts with parameter selection `param_select`, the loop's
    /// actuation outputs as `actuation` says), uploads `params` and forgets
    /// the last outcome.
    pub(super) fn reset_for_launch(
        &mut self,
        param_select: u64,
        params: &LoopParams,
        actuation: &ActuationFields,
    ) -> Result<(), GpuError> {
        let c = self.control();
        for line in [&c.tear_down, &c.data_ready, &c.stage, &c.stage_seq, &c.iterations, &c.idle_iterations] {
            line.store(0);
        }
        for line in [&c.frames, &c.skipped, &c.results, &c.handler_ns, &c.heartbeat_ns] {
            line.store(0);
        }
        c.state.store(STATE_RUNNING);
        let consumed = self.frame_ring.consumed();
        let st = DeviceLoopState {
            last_claimed: consumed,
            result_seq: self.result_writer.ring().head(),
            param_select,
            tx: actuation.tx,
            act_samples: actuation.samples,
            act_capacity: actuation.capacity,
            ..Default::default()
        };
        // SAFETY: DeviceLoopState is plain old data (integers, floats, padding zeroed by Default).
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&st as *const DeviceLoopState).cast::<u8>(),
                std::mem::size_of::<DeviceLoopState>(),
            )
        };
        self.state.write(0, bytes)?;
        self.upload_params(params)?;
        self.finished = None;
        Ok(())
    }

    /// Before a relaunch after a tear-down, continuing the loop's state: the
    /// claimed sequence, result numbering and counters stay; only the idle
    /// clock restarts, so the switch does not count towards
    /// `loop.timeout_ms`. `param_select` is the selection in force, if the
    /// loop has parameter banks; `actuation` says where the (new) chain's
    /// final samples are.
    pub(super) fn reset_for_relaunch(
        &mut self,
        param_select: Option<u64>,
        actuation: &ActuationFields,
    ) -> Result<(), GpuError> {
        let c = self.control();
        c.tear_down.store(0);
        c.state.store(STATE_RUNNING);
        self.state.write(std::mem::offset_of!(DeviceLoopState, last_frame_ns), &0u64.to_ne_bytes())?;
        // The new graph's pulls (if it streams) set their own watch.
        self.state.write(std::mem::offset_of!(DeviceLoopState, pull_watch_mark), &0u64.to_ne_bytes())?;
        // The new chain's final samples may sit in another buffer.
        let (samples, capacity) = (actuation.samples, actuation.capacity);
        self.state.write(std::mem::offset_of!(DeviceLoopState, act_samples), &samples.to_ne_bytes())?;
        self.state.write(std::mem::offset_of!(DeviceLoopState, act_capacity), &capacity.to_ne_bytes())?;
        if let Some(word) = param_select {
            self.state.write(std::mem::offset_of!(DeviceLoopState, param_select), &word.to_ne_bytes())?;
        }
        Ok(())
    }

    /// After [`Self::reset_for_relaunch`] and the relaunch count: uploads
    /// `params` and forgets the last outcome.
    pub(super) fn upload_for_relaunch(&mut self, params: &LoopParams) -> Result<(), GpuError> {
        self.upload_params(params)?;
        self.finished = None;
        Ok(())
    }

    /// Launches the instantiated resident graph on the run stream, where it
    /// runs until told to stop; a launch the device refuses is a fault.
    pub(super) fn launch_resident_graph(
        &self,
        exec: Option<&GraphExec>,
        stages: &Stages<'_>,
    ) -> Result<(), GpuError> {
        let exec = exec.ok_or_else(|| GpuError::Setup("graph not built".into()))?;
        exec.launch(&self.run_stream)?;
        if let Err(e) = driver::stream_done(&self.run_stream) {
            return Err(self.fault(e.into(), stages));
        }
        Ok(())
    }

    /// Waits for the per-frame work queued so far, reporting a failure of it.
    pub(super) fn sync(&self) -> Result<(), GpuError> {
        Ok(driver::stream_sync(&self.run_stream)?)
    }

    /// Host-driven mode: tells the handler a frame was published.
    pub(super) fn data_ready(&self) {
        self.control().data_ready.store(1);
    }

    /// Results published so far (the result-ready counter).
    pub(super) fn results_published(&self) -> u64 {
        self.control().results.load()
    }

    /// Counters published by the controller.
    pub(super) fn stats(&self) -> LoopStats {
        let c = self.control();
        LoopStats {
            frames_processed: c.results.load(),
            frames_skipped: c.skipped.load(),
            idle_iterations: c.idle_iterations.load(),
            iterations: c.iterations.load(),
        }
    }

    /// Nanoseconds the data-ready handler has spent running (polling or sleeping).
    pub(super) fn handler_busy_ns(&self) -> u64 {
        self.control().handler_ns.load()
    }

    /// The terminal state the GPU published (`STATE_*`).
    pub(super) fn state(&self) -> u64 {
        self.control().state.load()
    }

    /// Checks whether the graph ended by itself (timeout) or faulted.
    pub(super) fn poll(&mut self, stages: &Stages<'_>) -> Option<Result<(), Arc<GpuError>>> {
        if self.launched && stages.opts.style == LaunchStyle::Resident {
            match driver::stream_done(&self.run_stream) {
                Ok(false) => {}
                Ok(true) => {
                    self.launched = false;
                    self.finished = Some(Ok(()));
                }
                Err(e) => {
                    self.launched = false;
                    self.finished = Some(Err(Arc::new(self.fault(e.into(), stages))));
                }
            }
        }
        self.finished.clone()
    }

    /// Names the stage a failed run was in, from the marker the GPU left.
    pub(super) fn fault(&self, e: GpuError, stages: &Stages<'_>) -> GpuError {
        self.wedged.store(true, Ordering::Relaxed);
        let (opts, stage_names) = (stages.opts, stages.names);
        let c = self.control();
        // Without markers the frame is still known: the handler stores the
        // claimed sequence into the ring header before the workload runs.
        let seq = if opts.stage_markers { c.stage_seq.load() } else { self.frame_ring.claimed() };
        let stage = c.stage.load();
        let name = if opts.stage_markers {
            match stage {
                STAGE_IDLE => "between frames (data-ready handler or controller)".to_string(),
                STAGE_HANDLER => "data-ready handler".to_string(),
                STAGE_CONTROLLER => "controller".to_string(),
                STAGE_END_MARKER => "end marker".to_string(),
                s => stage_names
                    .get((s - STAGE_FIRST_OP) as usize)
                    .cloned()
                    .unwrap_or_else(|| format!("unknown stage marker {s}")),
            }
        } else if stages.fused {
            format!(
                "{} (set loop.fused_chain = \"off\" and enable stage markers to pinpoint the operator)",
                stage_names.join(", ")
            )
        } else if c.frames.load() > c.results.load() || opts.style != LaunchStyle::Resident {
            format!("workload (one of {}; enable stage markers to pinpoint)", stage_names.join(", "))
        } else {
            "data-ready handler or controller".to_string()
        };
        GpuError::StageFault { stage: name, ring_seq: seq, error: e.to_string() }
    }

    /// Stops the loop: raises tear-down (resident style) and waits, bounded,
    /// for the queued work to finish. Always returns; reports a fault, or a
    /// timeout (a wedged GPU). Either marks the executor wedged.
    pub(super) fn tear_down(&mut self, stages: &Stages<'_>) -> Result<LoopStats, GpuError> {
        let opts = stages.opts;
        let resident = opts.style == LaunchStyle::Resident;
        if resident {
            self.control().tear_down.store(1);
        }
        // Saturating: the waits come from the config and must not overflow.
        let grace = opts.tear_down_wait.saturating_add(Duration::from_micros(
            opts.loop_cfg.poll_budget_us.saturating_add(opts.loop_cfg.data_not_ready_sleep_interval_us),
        ));
        let run_stream = Arc::clone(&self.run_stream);
        let wait = wait_for_stream(grace, || Ok(driver::stream_done(&run_stream)?));
        if wait.means_wedged() {
            self.wedged.store(true, Ordering::Relaxed);
        }
        match wait {
            StreamWait::Finished => {
                self.launched = false;
                if resident {
                    self.finished = Some(Ok(()));
                }
                Ok(self.stats())
            }
            StreamWait::TimedOut => Err(GpuError::TearDownTimeout {
                waited_ms: u64::try_from(opts.tear_down_wait.as_millis()).unwrap_or(u64::MAX),
                stage: self.control().stage.load().to_string(),
            }),
            StreamWait::Failed(e) => {
                self.launched = false;
                Err(self.fault(e, stages))
            }
        }
    }

    /// True once a tear-down timed out or a fault was seen: the device may
    /// still touch the loop's memory.
    pub(super) fn is_wedged(&self) -> bool {
        self.wedged.load(Ordering::Relaxed)
    }
}

/// What naming a fault's stage needs besides the control block: the
/// executor's options and the names of the workload's stages.
pub(super) struct Stages<'a> {
    pub(super) opts: &'a ExecutorOptions,
    /// The workload's stage names, in execution order.
    pub(super) names: &'a [String],
    /// Whether the data-ready handler runs the chain fused.
    pub(super) fused: bool,
}

/// How a bounded wait for the loop's stream ended.
#[derive(Debug)]
enum StreamWait {
    /// Everything queued finished.
    Finished,
    /// Still running after the grace period: the device stopped answering.
    TimedOut,
    /// The stream reported an error (a fault: the context is unusable).
    Failed(GpuError),
}

impl StreamWait {
    /// A timeout or a fault: the device may still touch the loop's memory.
    fn means_wedged(&self) -> bool {
        !matches!(self, StreamWait::Finished)
    }
}

/// Polls `done` (a non-blocking stream query) until it says finished, fails,
/// or `grace` has passed; never blocks on the device itself.
fn wait_for_stream(grace: Duration, mut done: impl FnMut() -> Result<bool, GpuError>) -> StreamWait {
    let started = Instant::now();
    loop {
        match done() {
            Ok(true) => return StreamWait::Finished,
            Ok(false) if started.elapsed() < grace => std::thread::sleep(Duration::from_micros(50)),
            Ok(false) => return StreamWait::TimedOut,
            Err(e) => return StreamWait::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_that_never_finishes_times_out_within_the_grace_and_means_wedged() {
        let grace = Duration::from_millis(30);
        let started = Instant::now();
        let mut polls = 0;
        let wait = wait_for_stream(grace, || {
            polls += 1;
            Ok(false)
        });
        assert!(matches!(wait, StreamWait::TimedOut), "{wait:?}");
        assert!(wait.means_wedged());
        assert!(started.elapsed() >= grace && started.elapsed() < Duration::from_secs(2));
        assert!(polls > 1, "polled, not blocked");
    }

    #[test]
    fn a_fault_while_waiting_means_wedged_and_a_finished_stream_does_not() {
        let fault = wait_for_stream(Duration::from_secs(5), || {
            Err(GpuError::Setup("CUDA_ERROR_ILLEGAL_ADDRESS".into()))
        });
        assert!(matches!(fault, StreamWait::Failed(_)) && fault.means_wedged(), "{fault:?}");
        let mut polls = 0;
        let finished = wait_for_stream(Duration::from_secs(5), || {
            polls += 1;
            Ok(polls == 3)
        });
        assert!(matches!(finished, StreamWait::Finished) && !finished.means_wedged(), "{finished:?}");
        assert_eq!(polls, 3);
    }
}
