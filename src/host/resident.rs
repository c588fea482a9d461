//! [`HostLoop`]: the host backend of the resident loop. A thread runs the
//! [`LoopCore`] with the real clock and real pauses; the host API (launch,
//! data ready, result ready, tear down) matches the GPU-resident executor's.

use super::HostError;
use super::core::{ChainSwitch, LoopControl, LoopCore, LoopEnd, Step, Trigger};
use crate::backend::{BackendError, LiveChain, LoopStats, ResidentLoop};
use crate::clock;
use crate::config::LoopConfig;
use crate::ops::{ChainError, CpuChain, OpSpec};
use crate::ring::{FrameRing, ResultRing};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

/// Pauses shorter than this spin (sleeping would overshoot them by tens of
/// microseconds); longer ones park the thread so a tear-down can wake it.
pub const SPIN_BELOW_NS: u64 = 50_000;

/// What the loop thread hands back when it ends: the core (for a relaunch)
/// and why it ended.
type ThreadOutcome = (LoopCore, LoopEnd);

/// The host resident loop. See the module documentation.
pub struct HostLoop {
    control: Arc<LoopControl>,
    /// The core while the loop is not running; moved into the thread by
    /// `launch` and back by `tear_down`. `None` after a thread panicked.
    core: Option<LoopCore>,
    /// Invariant: `Some` exactly between `launch` and `tear_down`.
    thread: Option<JoinHandle<ThreadOutcome>>,
    /// The operator names of the chain last handed to the loop, for errors;
    /// a reload's [`HostLiveChain`] updates it.
    chain_names: Arc<Mutex<String>>,
    /// Core and SCHED_FIFO priority for the loop thread (`service.loop_cpu`,
    /// `service.realtime_priority`), applied when the thread starts.
    placement: (Option<usize>, Option<u8>),
    /// `loop.host_nice`: the loop thread's nice value when it has no
    /// SCHED_FIFO priority.
    nice: i32,
    /// The reload path's handle on the chain; taken once.
    live_chain: Option<HostLiveChain>,
}

/// The host loop's [`LiveChain`]: builds each new [`CpuChain`] on the
/// caller's thread and stages it for the loop thread, which switches to it
/// before its next claim.
pub struct HostLiveChain {
    switch: Arc<ChainSwitch>,
    max_frame_bytes: usize,
    chain_names: Arc<Mutex<String>>,
}

fn names_of(chain: &[OpSpec]) -> String {
    chain.iter().map(OpSpec::name).collect::<Vec<_>>().join(" -> ")
}

impl LiveChain for HostLiveChain {
    fn stage(&mut self, chain: &[OpSpec], generation: u32) -> Result<(), Vec<ChainError>> {
        let built = CpuChain::new(chain, self.max_frame_bytes)?;
        self.switch.stage(built, generation);
        *self.chain_names.lock().unwrap_or_else(PoisonError::into_inner) = names_of(chain);
        Ok(())
    }

    fn applied_generation(&self) -> u32 {
        self.switch.applied_generation()
    }
}

impl HostLoop {
    /// Builds the loop over `frames` (whose reader it takes) and `results`,
    /// running `chain` on frames of at most `max_frame_bytes` bytes.
    pub fn new(
        frames: Arc<FrameRing>,
        results: Arc<ResultRing>,
        chain: Vec<OpSpec>,
        max_frame_bytes: usize,
        config: LoopConfig,
    ) -> Result<Self, HostError> {
        Self::with_trigger(frames, results, chain, max_frame_bytes, config, Trigger::RingHead)
    }

    /// As [`HostLoop::new`], choosing between ring detection and host-driven mode.
    pub fn with_trigger(
        frames: Arc<FrameRing>,
        results: Arc<ResultRing>,
        chain: Vec<OpSpec>,
        max_frame_bytes: usize,
        config: LoopConfig,
        trigger: Trigger,
    ) -> Result<Self, HostError> {
        let cpu_chain = CpuChain::new(&chain, max_frame_bytes).map_err(HostError::Chain)?;
        let reader = frames.reader().ok_or(HostError::ReaderTaken)?;
        let results = results.writer().ok_or(HostError::ResultWriterTaken)?;
        let control = LoopControl::new();
        let chain_names = Arc::new(Mutex::new(names_of(&chain)));
        let nice = config.host_nice;
        let core = LoopCore::new(reader, results, cpu_chain, config, trigger, Arc::clone(&control));
        let live_chain = HostLiveChain {
            switch: Arc::clone(core.chain_switch()),
            max_frame_bytes,
            chain_names: Arc::clone(&chain_names),
        };
        Ok(Self {
            control,
            core: Some(core),
            thread: None,
            chain_names,
            placement: (None, None),
            nice,
            live_chain: Some(live_chain),
        })
    }

    /// Publishes each processed frame's final samples and record into the
    /// output ring of `writer` from the next launch on. The ring must be in
    /// host memory, and the loop not launched.
    pub fn write_outputs(&mut self, writer: crate::output::OutputWriter) -> Result<(), HostError> {
        if writer.device_layout().is_some() {
            return Err(HostError::OutputInDeviceMemory);
        }
        let core = self.core.as_mut().ok_or(HostError::OutputWhileLaunched)?;
        core.set_output(writer);
        Ok(())
    }

    /// Runs `stage` after the chain on every frame from the next launch on
    /// (the host twin of a user kernel writing the user result words and
    /// asking for an actuation). The loop must not be launched.
    pub fn set_user_stage(&mut self, stage: super::UserStage) -> Result<(), HostError> {
        self.core.as_mut().ok_or(HostError::Launched { what: "a user stage" })?.set_user_stage(stage);
        Ok(())
    }

    /// Forms each frame's actuation messages into `actuator`'s transmit ring
    /// from the next launch on. The loop must not be launched.
    pub fn actuate(&mut self, actuator: crate::actuate::Actuator) -> Result<(), HostError> {
        self.core
            .as_mut()
            .ok_or(HostError::Launched { what: "the actuation outputs" })?
            .set_actuator(actuator);
        Ok(())
    }

    /// Pins the loop thread to `cpu` and runs it under SCHED_FIFO `priority`
    /// from the next launch on; `launch` fails if either is refused.
    pub fn place_thread(&mut self, cpu: Option<usize>, priority: Option<u8>) {
        self.placement = (cpu, priority);
    }

    /// Host-driven mode: makes the next iteration claim a frame.
    pub fn data_ready(&self) {
        self.control.raise_data_ready();
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }

    /// True when a result was published since the last call.
    pub fn result_ready(&self) -> bool {
        self.control.take_result_ready()
    }

    /// Host-driven triggers that found no frame to claim.
    pub fn empty_triggers(&self) -> u64 {
        self.control.empty_triggers()
    }

    fn stage_error(&self, message: String) -> BackendError {
        let stage = self.control.stage();
        let stage = match stage {
            super::core::LoopStage::Chain => {
                let names = self.chain_names.lock().unwrap_or_else(PoisonError::into_inner);
                format!("{} ({names})", stage.name())
            }
            _ => stage.name().to_string(),
        };
        BackendError::Stage { stage: format!("host loop: {stage}"), message }
    }
}

/// Runs the core until it ends, with the real clock and real pauses.
fn run_loop(mut core: LoopCore) -> ThreadOutcome {
    core.reset_timing(clock::realtime_ns());
    loop {
        match core.step(clock::realtime_ns()) {
            Step::Ready => {
                if core.process(clock::realtime_ns()).is_some() {
                    core.complete(clock::realtime_ns());
                }
            }
            Step::Pause { ns } | Step::Sleep { ns } => pause(ns),
            Step::End(end) => return (core, end),
        }
    }
}

/// Waits `ns`: one spin hint for 0, a monotonic busy-wait below
/// [`SPIN_BELOW_NS`], a park (woken early by tear-down or data-ready) above.
fn pause(ns: u64) {
    if ns == 0 {
        std::hint::spin_loop();
    } else if ns < SPIN_BELOW_NS {
        let deadline = clock::monotonic_ns() + ns;
        while clock::monotonic_ns() < deadline {
            std::hint::spin_loop();
        }
    } else {
        std::thread::park_timeout(Duration::from_nanos(ns));
    }
}

fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panicked with a non-string payload".to_string()
    }
}

impl ResidentLoop for HostLoop {
    fn backend_name(&self) -> &'static str {
        "host"
    }

    fn launch(&mut self) -> Result<(), BackendError> {
        if self.thread.is_some() {
            return Err(BackendError::AlreadyLaunched);
        }
        let core = self.core.take().ok_or(BackendError::StateLost)?;
        self.control.rearm();
        let (cpu, priority) = self.placement;
        let nice = self.nice;
        let (placed_tx, placed_rx) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new().name("frameloop-host-loop".into()).spawn(move || {
            let placed = crate::service::threads::place_current_thread("resident loop", cpu, priority);
            if priority.is_none()
                && nice > 0
                && let Err(e) = crate::realtime::set_current_thread_nice(nice)
            {
                tracing::warn!(
                    "loop.host_nice = {nice} refused ({e}); the loop thread runs at the receiver's priority"
                );
            }
            let ok = placed.is_ok();
            let _ = placed_tx.send(placed);
            if ok { run_loop(core) } else { (core, LoopEnd::TornDown) }
        });
        match spawned {
            Ok(handle) => {
                if let Ok(Err(e)) = placed_rx.recv() {
                    if let Ok((core, _)) = handle.join() {
                        self.core = Some(core);
                    }
                    return Err(BackendError::Placement(Box::new(e)));
                }
                self.thread = Some(handle);
                Ok(())
            }
            Err(e) => Err(BackendError::Spawn(e)),
        }
    }

    fn take_live_chain(&mut self) -> Option<Box<dyn LiveChain>> {
        self.live_chain.take().map(|l| Box::new(l) as Box<dyn LiveChain>)
    }

    fn is_launched(&self) -> bool {
        self.thread.as_ref().is_some_and(|t| !t.is_finished())
    }

    fn stats(&self) -> LoopStats {
        self.control.stats()
    }

    fn tear_down(&mut self) -> Result<LoopStats, BackendError> {
        let Some(handle) = self.thread.take() else {
            return Err(BackendError::NotLaunched);
        };
        self.control.request_tear_down();
        handle.thread().unpark();
        match handle.join() {
            Ok((core, end)) => {
                self.core = Some(core);
                match end {
                    LoopEnd::TornDown => Ok(self.control.stats()),
                    LoopEnd::TimedOut { ms } => Err(BackendError::TimedOut { ms }),
                }
            }
            Err(payload) => Err(self.stage_error(format!("panicked: {}", panic_message(&*payload)))),
        }
    }
}

impl Drop for HostLoop {
    fn drop(&mut self) {
        if let Some(handle) = self.thread.take() {
            self.control.request_tear_down();
            handle.thread().unpark();
            // A panic in the thread was already reported by the panic hook;
            // a destructor must not panic again.
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::LoopStage;
    use crate::ops::default_chain;
    use crate::ring::HostMemory;
    use crate::ring::layout::{result_ring_bytes, ring_bytes};

    fn host_loop() -> HostLoop {
        let mem = HostMemory::new(ring_bytes(2, 64).unwrap()).unwrap();
        let frames = FrameRing::new(Box::new(mem), 2, 64, crate::ring::OverrunPolicy::Every).unwrap();
        let results =
            ResultRing::new(Box::new(HostMemory::new(result_ring_bytes(16).unwrap()).unwrap()), 16).unwrap();
        HostLoop::new(frames, results, default_chain(), 64, LoopConfig::default()).unwrap()
    }

    #[test]
    fn a_failure_names_the_stage_and_the_chain() {
        let host = host_loop();
        host.control.enter(LoopStage::Chain);
        let err = host.stage_error(panic_message(&String::from("index out of bounds")));
        let text = err.to_string();
        assert!(text.contains("host loop: operator chain (unpack -> fir -> stats -> threshold)"), "{text}");
        assert!(text.contains("index out of bounds"), "{text}");
        host.control.enter(LoopStage::Result);
        assert!(host.stage_error("x".into()).to_string().contains("host loop: result publish"));
        assert_eq!(panic_message(&"static"), "static");
        assert_eq!(panic_message(&42u32), "panicked with a non-string payload");
    }

    #[test]
    fn the_live_chain_is_taken_once_and_renames_the_chain_in_errors() {
        let mut host = host_loop();
        let mut live = host.take_live_chain().expect("the first take gets the handle");
        assert!(host.take_live_chain().is_none(), "a single writer");
        let mut chain = default_chain();
        chain.remove(1);
        live.stage(&chain, 1).unwrap();
        host.control.enter(LoopStage::Chain);
        let text = host.stage_error("x".into()).to_string();
        assert!(text.contains("(unpack -> stats -> threshold)"), "{text}");
        chain.insert(1, OpSpec::Fir { taps: vec![1.0; 2] });
        assert!(live.stage(&chain, 2).is_err(), "an even tap count is refused");
        assert_eq!(live.applied_generation(), 0, "nothing ran yet");
    }

    #[test]
    fn dropping_a_launched_loop_stops_its_thread() {
        let mut host = host_loop();
        host.launch().unwrap();
        let control = Arc::clone(&host.control);
        drop(host);
        assert!(control.tear_down_requested());
    }
}
