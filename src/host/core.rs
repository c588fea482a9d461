//! The pure core of the host resident loop: one call per handler check, with
//! the GPU data-ready handler's semantics. It reads no clock and never
//! sleeps: the time comes in as an argument and a pause is requested by the
//! returned [`Step`], so tests drive it in memory with a fake clock.
//!
//! One loop iteration mirrors one turn of the GPU graph's WHILE node: the
//! handler checks for a frame (the ring head, or the host's data-ready flag),
//! polling within `poll_budget_us` with `poll_interval_ns` pauses; on a frame
//! it claims the slot, the chain runs, and the result is published; without
//! one the iteration ends and the loop sleeps `data_not_ready_sleep_interval_us`
//! (Holoscan's controller). `timeout_ms` without a frame, or a tear-down
//! request, ends the loop.
//!
//! A new chain staged through the [`ChainSwitch`] (a reload) is swapped in
//! before the next claim, never during a frame: every frame runs entirely
//! with one chain and its result carries that chain's `param_generation`.

use crate::backend::LoopStats;
use crate::config::LoopConfig;
use crate::ops::{ChainOutput, CpuChain};
use crate::output::OutputWriter;
use crate::output::layout::USER_RESULT_WORDS;
use crate::ring::{ResultRecord, ResultWriter, RingReader, SlotHeader};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

/// What makes an iteration process a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Trigger {
    /// The data-ready handler watches the ring head (the normal mode); a
    /// host `data_ready()` also makes the next check claim at once.
    #[default]
    RingHead,
    /// Host-driven mode: no ring detection; only `data_ready()` makes an
    /// iteration claim the next frame (one claim per raised flag).
    HostDriven,
}

/// The part of the loop a thread was in, for naming the stage of a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum LoopStage {
    /// Not started yet, or between steps.
    Idle = 0,
    /// The data-ready handler: checking the head and claiming a slot.
    Handler = 1,
    /// The operator chain.
    Chain = 2,
    /// Writing the result record and releasing the slot.
    Result = 3,
}

impl LoopStage {
    fn from_code(code: u8) -> Self {
        match code {
            1 => LoopStage::Handler,
            2 => LoopStage::Chain,
            3 => LoopStage::Result,
            _ => LoopStage::Idle,
        }
    }

    /// Stable name used in errors.
    pub fn name(self) -> &'static str {
        match self {
            LoopStage::Idle => "loop",
            LoopStage::Handler => "data-ready handler",
            LoopStage::Chain => "operator chain",
            LoopStage::Result => "result publish",
        }
    }
}

/// Flags and counters shared between the loop thread and the host API: the
/// host twin of the GPU loop's control block in mapped memory.
#[derive(Debug, Default)]
pub struct LoopControl {
    tear_down: AtomicBool,
    data_ready: AtomicBool,
    result_ready: AtomicBool,
    /// A `LoopStage` code; written only by the loop thread.
    stage: AtomicU8,
    /// Counters; each is written only by the loop thread (single writer), so
    /// a relaxed load-add-store never loses an update.
    frames_processed: AtomicU64,
    frames_skipped: AtomicU64,
    idle_iterations: AtomicU64,
    iterations: AtomicU64,
    empty_triggers: AtomicU64,
}

fn bump(counter: &AtomicU64, by: u64) {
    counter.store(counter.load(Ordering::Relaxed) + by, Ordering::Relaxed);
}

impl LoopControl {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Asks the loop to end; it stops at its next check.
    pub fn request_tear_down(&self) {
        self.tear_down.store(true, Ordering::Release);
    }

    pub fn tear_down_requested(&self) -> bool {
        self.tear_down.load(Ordering::Acquire)
    }

    /// Clears the tear-down request before a new launch.
    pub fn rearm(&self) {
        self.tear_down.store(false, Ordering::Release);
        self.stage.store(LoopStage::Idle as u8, Ordering::Relaxed);
    }

    /// Host-driven mode: the next check claims a frame without watching the head.
    pub fn raise_data_ready(&self) {
        self.data_ready.store(true, Ordering::Release);
    }

    /// Consumes the data-ready flag.
    fn take_data_ready(&self) -> bool {
        // Load first: the common case (flag down) costs no read-modify-write.
        self.data_ready.load(Ordering::Relaxed) && self.data_ready.swap(false, Ordering::AcqRel)
    }

    /// True when a result was published since the last call.
    pub fn take_result_ready(&self) -> bool {
        self.result_ready.load(Ordering::Relaxed) && self.result_ready.swap(false, Ordering::AcqRel)
    }

    /// The stage the loop thread was in most recently.
    pub fn stage(&self) -> LoopStage {
        LoopStage::from_code(self.stage.load(Ordering::Relaxed))
    }

    pub(crate) fn enter(&self, stage: LoopStage) {
        self.stage.store(stage as u8, Ordering::Relaxed);
    }

    /// Counters so far.
    pub fn stats(&self) -> LoopStats {
        LoopStats {
            frames_processed: self.frames_processed.load(Ordering::Relaxed),
            frames_skipped: self.frames_skipped.load(Ordering::Relaxed),
            idle_iterations: self.idle_iterations.load(Ordering::Relaxed),
            iterations: self.iterations.load(Ordering::Relaxed),
        }
    }

    /// Host-driven triggers that found no published frame to claim.
    pub fn empty_triggers(&self) -> u64 {
        self.empty_triggers.load(Ordering::Relaxed)
    }
}

/// What a host user stage gives back for a frame: the twin of a user
/// kernel's `fl_user_result` words and its `fl_request_actuation` flag.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct UserStageResult {
    /// The frame's user result words (`ResultRecord::user`).
    pub words: [u32; USER_RESULT_WORDS],
    /// Ask the `when = "flag"` actuation outputs to send for this frame.
    pub request_actuation: bool,
}

/// A Rust function the host loop runs after the chain on every frame, with
/// the chain's final samples and the frame's record so far: the host
/// backend's counterpart of a user kernel that writes the user result and
/// may ask for an actuation. It runs on the loop thread: keep it short.
pub type UserStage = Box<dyn FnMut(&[f32], &ResultRecord) -> UserStageResult + Send>;

/// A chain waiting for the loop to switch to it, with its parameter generation.
struct StagedChain {
    chain: CpuChain,
    generation: u32,
}

/// The hand-off of a new chain from the reload path to the loop thread. The
/// chain is built (allocated) on the caller's thread; the loop only swaps it
/// in between two frames, and the chain it replaces is dropped by the next
/// [`ChainSwitch::stage`], off the hot path.
#[derive(Default)]
pub struct ChainSwitch {
    /// Invariant: `pending` is true exactly while `staged` holds a chain;
    /// both change only under the `staged` lock.
    staged: Mutex<Option<StagedChain>>,
    pending: AtomicBool,
    /// The chain the loop switched away from, waiting to be freed.
    retired: Mutex<Option<CpuChain>>,
    /// Generation of the chain the loop runs now (written by the loop thread).
    applied: AtomicU32,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ChainSwitch {
    /// Hands `chain` to the loop: it runs every frame claimed from its next
    /// claim on, stamped `generation`. A chain staged earlier and not yet
    /// taken is replaced (its generation never runs).
    pub fn stage(&self, chain: CpuChain, generation: u32) {
        drop(lock(&self.retired).take());
        let mut staged = lock(&self.staged);
        *staged = Some(StagedChain { chain, generation });
        self.pending.store(true, Ordering::Release);
    }

    /// The generation of the chain the loop runs now.
    pub fn applied_generation(&self) -> u32 {
        self.applied.load(Ordering::Acquire)
    }

    /// True while a staged chain waits for the loop's next claim.
    pub fn is_pending(&self) -> bool {
        self.pending.load(Ordering::Acquire)
    }

    /// The staged chain, if any; one relaxed load when there is none.
    fn take(&self) -> Option<StagedChain> {
        if !self.pending.load(Ordering::Acquire) {
            return None;
        }
        let mut staged = lock(&self.staged);
        let taken = staged.take();
        self.pending.store(false, Ordering::Release);
        debug_assert!(taken.is_some(), "pending without a staged chain");
        taken
    }
}

/// What the driver does after a [`LoopCore::step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Data is ready: call [`LoopCore::process`] with the time now (the
    /// detect time, read after this check), then, if it ran the chain,
    /// [`LoopCore::complete`] with the time after it.
    Ready,
    /// Still inside the poll budget: pause this long (0 = one spin) and step again.
    Pause { ns: u64 },
    /// The iteration ended without data: sleep this long (0 = not at all)
    /// and step again, which starts the next iteration.
    Sleep { ns: u64 },
    /// The loop is over.
    End(LoopEnd),
}

/// Why the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoopEnd {
    /// The host asked for it.
    TornDown,
    /// `timeout_ms` passed without a frame; the loop tore itself down.
    TimedOut { ms: u64 },
}

/// The host loop state machine. See the module documentation.
pub struct LoopCore {
    reader: RingReader,
    results: ResultWriter,
    chain: CpuChain,
    config: LoopConfig,
    trigger: Trigger,
    control: Arc<LoopControl>,
    /// Time the current iteration began; `None` between iterations.
    iteration_start_ns: Option<u64>,
    /// Time of the most recent frame, or of the first step: the timeout reference.
    last_frame_ns: Option<u64>,
    /// `step` returned [`Step::Ready`] and [`LoopCore::process`] has not run yet.
    armed: bool,
    /// The claimed, computed frame waiting for [`LoopCore::complete`].
    /// Invariant: when `Some`, its slot is claimed and not yet finished.
    pending: Option<ResultRecord>,
    /// Where each frame's final samples go, when the output ring is enabled.
    output: Option<OutputWriter>,
    /// Where reloads hand over a new chain.
    switch: Arc<ChainSwitch>,
    /// Parameter generation of `chain`, stamped on every result it computes.
    generation: u32,
    /// The user stage run after the chain, if any.
    user_stage: Option<UserStage>,
    /// The actuation outputs' former, when the loop has `[[actuate]]` outputs.
    actuator: Option<crate::actuate::Actuator>,
}

impl LoopCore {
    pub fn new(
        reader: RingReader,
        results: ResultWriter,
        chain: CpuChain,
        config: LoopConfig,
        trigger: Trigger,
        control: Arc<LoopControl>,
    ) -> Self {
        Self {
            reader,
            results,
            chain,
            config,
            trigger,
            control,
            iteration_start_ns: None,
            last_frame_ns: None,
            armed: false,
            pending: None,
            output: None,
            switch: Arc::default(),
            generation: 0,
            user_stage: None,
            actuator: None,
        }
    }

    /// Where a new chain is staged for this loop (see [`ChainSwitch`]).
    pub fn chain_switch(&self) -> &Arc<ChainSwitch> {
        &self.switch
    }

    /// Swaps in a staged chain, if one waits. Called only between frames:
    /// no frame is claimed and none is pending.
    fn switch_chain(&mut self) {
        debug_assert!(self.pending.is_none(), "a chain switch inside a frame");
        if let Some(StagedChain { chain, generation }) = self.switch.take() {
            let old = std::mem::replace(&mut self.chain, chain);
            self.generation = generation;
            self.switch.applied.store(generation, Ordering::Release);
            *lock(&self.switch.retired) = Some(old);
        }
    }

    /// Publishes every completed frame's final samples and record into the
    /// output ring of `writer` (host memory: the caller checked).
    pub fn set_output(&mut self, writer: OutputWriter) {
        debug_assert!(writer.device_layout().is_none());
        self.output = Some(writer);
    }

    /// Runs `stage` after the chain on every frame from the next claim on.
    pub fn set_user_stage(&mut self, stage: UserStage) {
        self.user_stage = Some(stage);
    }

    /// Forms every frame's actuation messages with `actuator` as the last
    /// step of its result.
    pub fn set_actuator(&mut self, actuator: crate::actuate::Actuator) {
        self.actuator = Some(actuator);
    }

    pub fn control(&self) -> &Arc<LoopControl> {
        &self.control
    }

    pub fn config(&self) -> &LoopConfig {
        &self.config
    }

    /// Forgets the timeout reference and any half-finished iteration, so that
    /// a relaunch starts afresh (a pending frame is completed first).
    pub fn reset_timing(&mut self, now_ns: u64) {
        self.settle(now_ns);
        self.iteration_start_ns = None;
        self.last_frame_ns = None;
    }

    /// One check of the data-ready handler at time `now_ns`.
    pub fn step(&mut self, now_ns: u64) -> Step {
        self.settle(now_ns);
        self.control.enter(LoopStage::Handler);
        let last_frame_ns = *self.last_frame_ns.get_or_insert(now_ns);
        if self.control.tear_down_requested() {
            self.iteration_start_ns = None;
            return Step::End(LoopEnd::TornDown);
        }
        let iteration_start = match self.iteration_start_ns {
            Some(t) => t,
            None => {
                bump(&self.control.iterations, 1);
                self.iteration_start_ns = Some(now_ns);
                now_ns
            }
        };
        let triggered = match self.trigger {
            Trigger::RingHead => self.control.take_data_ready() || self.reader.ready(),
            Trigger::HostDriven => self.control.take_data_ready(),
        };
        if triggered {
            self.armed = true;
            return Step::Ready;
        }
        let timeout_ns = self.config.timeout_ms.saturating_mul(1_000_000);
        if timeout_ns > 0 && now_ns.saturating_sub(last_frame_ns) >= timeout_ns {
            self.end_idle_iteration();
            return Step::End(LoopEnd::TimedOut { ms: self.config.timeout_ms });
        }
        let budget_ns = self.config.poll_budget_us.saturating_mul(1000);
        let elapsed = now_ns.saturating_sub(iteration_start);
        if elapsed >= budget_ns {
            self.end_idle_iteration();
            return Step::Sleep { ns: self.config.data_not_ready_sleep_interval_us.saturating_mul(1000) };
        }
        // Never pause past the end of the budget.
        Step::Pause { ns: self.config.poll_interval_ns.min(budget_ns - elapsed) }
    }

    fn end_idle_iteration(&mut self) {
        self.iteration_start_ns = None;
        bump(&self.control.idle_iterations, 1);
    }

    /// Finishes whatever the driver left half done (a `Ready` not processed,
    /// a frame not completed), so no slot stays claimed.
    fn settle(&mut self, now_ns: u64) {
        if self.armed {
            self.process(now_ns);
        }
        if self.pending.is_some() {
            self.complete(now_ns);
        }
    }

    /// After [`Step::Ready`]: claims the next frame under the ring's policy,
    /// stamps it detected at `detect_ns` and runs the chain on it. Returns its
    /// ring sequence, or `None` when there was nothing to claim (a host
    /// data-ready with no frame published, counted; the iteration goes on).
    pub fn process(&mut self, detect_ns: u64) -> Option<u64> {
        if !std::mem::replace(&mut self.armed, false) {
            return None;
        }
        if self.pending.is_some() {
            self.complete(detect_ns);
        }
        self.switch_chain();
        let Some(slot) = self.reader.claim() else {
            bump(&self.control.empty_triggers, 1);
            return None;
        };
        let (ring_seq, header, skipped) = (slot.seq, slot.header, slot.skipped);
        self.control.enter(LoopStage::Chain);
        let out = self.chain.run(slot.payload);
        let mut record = result_record(ring_seq, &header, skipped, &out, detect_ns);
        record.param_generation = self.generation;
        if let Some(stage) = &mut self.user_stage {
            let got = stage(self.chain.output(&out), &record);
            record.user = got.words;
            record.actuate_request = u32::from(got.request_actuation);
        }
        self.pending = Some(record);
        self.iteration_start_ns = None;
        self.last_frame_ns = Some(detect_ns);
        Some(ring_seq)
    }

    /// Stamps the pending result with `done_ns`, pushes it to the result ring,
    /// releases its slot and raises result-ready. Returns the result sequence,
    /// or `None` when no frame was pending.
    pub fn complete(&mut self, done_ns: u64) -> Option<u64> {
        let mut record = self.pending.take()?;
        self.control.enter(LoopStage::Result);
        record.done_ns = done_ns;
        let result_seq = self.results.push(&record);
        record.result_seq = result_seq;
        // The chain's buffers still hold this frame's samples: the next
        // frame runs only after this call.
        let last = ChainOutput { output_len: record.output_len as usize, ..ChainOutput::default() };
        if let Some(output) = &mut self.output {
            // Host memory (checked by `set_output`), so publishing cannot fail.
            let _ = output.publish(&record, &record.user, self.chain.output(&last));
        }
        if let Some(actuator) = &mut self.actuator {
            actuator.on_result(&record, self.chain.output(&last), done_ns);
        }
        self.reader.finish(record.ring_seq);
        bump(&self.control.frames_processed, 1);
        bump(&self.control.frames_skipped, record.skipped_before);
        if self.config.sync_with_host {
            std::sync::atomic::fence(Ordering::SeqCst);
        }
        self.control.result_ready.store(true, Ordering::Release);
        self.control.enter(LoopStage::Idle);
        Some(result_seq)
    }
}

/// The result record of one frame, before its `done_ns` is known.
fn result_record(
    ring_seq: u64,
    header: &SlotHeader,
    skipped: u64,
    out: &ChainOutput,
    detect_ns: u64,
) -> ResultRecord {
    let stats = out.stats.unwrap_or_default();
    let (detect_count, first_detect_index) = out.detect.unwrap_or((0, -1));
    ResultRecord {
        ring_seq,
        frame_seq: header.frame_seq,
        stream_id: header.stream_id,
        slot_flags: header.flags,
        sender_ts_ns: header.sender_ts_ns,
        first_rx_ns: header.first_rx_ns,
        last_rx_ns: header.last_rx_ns,
        published_ns: header.published_ns,
        detect_ns,
        sum: stats.sum,
        min: stats.min,
        max: stats.max,
        mean: stats.mean,
        detect_count,
        first_detect_index,
        output_len: out.output_len as u32,
        result_flags: out.result_flags(),
        skipped_before: skipped,
        ..Default::default()
    }
}
