//! Live chain changes on the CUDA backend: the resident graph stops between
//! two frames (its WHILE loop exits; frames wait in the ring), takes the new
//! chain by an in-place update of the executable graph (`cuGraphExecUpdate`)
//! or a new instantiation, and is relaunched under the new parameter
//! generation, which every result it publishes carries. A change of the
//! built-in operators' values only goes to the loop's parameter banks
//! instead ([`super::param_banks`]): no stop, no relaunch.

use super::GpuError;
use super::control::{DeviceLoopState, LoopParams, STATE_RUNNING};
use super::driver::Graph;
use super::executor::graph::{BuiltinHandler, FusedBuffers, plan_fragment};
use super::executor::{ExecutorCore, LaunchStyle, ResidentExecutor};
use super::fused::FusedChain;
use super::param_banks::{self, BankSwitch, ParamBanks, ParamLayout, bank_of, select_word};
use crate::backend::LiveChain;
use crate::config::{Config, FusedChainMode};
use crate::fragment::Fragment;
use crate::ops::{ChainError, OpSpec};
use crate::reload::{ChangeClass, classify};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

/// A chain prepared for [`ExecutorCore::swap_chain`].
pub struct NextChain {
    /// The main fragment: one kernel per operator, or empty with `fused`.
    pub workload: Fragment,
    /// The fused chain the handler runs itself, if the chain is fused.
    pub fused: Option<FusedChain>,
    /// `RESULT_HAS_*` flags of the chain.
    pub chain_flags: u32,
    /// The chain's parameter bank image, for a loop with banks.
    pub param_image: Option<Vec<super::fused::FusedStep>>,
    /// The workload loads modules when it is captured (user kernels): a
    /// module load waits for the running graph, which never ends by itself,
    /// so such a workload is captured once the old graph stopped (compile
    /// the sources first, [`super::user_kernel::compile_ahead`], so that
    /// only the load falls into the gap).
    pub loads_modules: bool,
}

/// How a swap rebuilds the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum SwapMode {
    /// Capture the new graph while the old one still runs, then, with the
    /// loop stopped, update the executable graph in place; instantiate anew
    /// only when the driver refuses the update.
    Update,
    /// Stop the loop, then capture and instantiate the new graph (a full
    /// rebuild: the baseline the in-place update is measured against).
    Reinstantiate,
}

/// What one swap did and how long it took.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SwapReport {
    pub generation: u32,
    /// The values went to the parameter banks: the graph kept running
    /// (`gap` is zero; `prepare` is the bank write and publication).
    pub banked: bool,
    /// The executable graph was updated in place (no new instantiation).
    pub in_place: bool,
    /// Preparing while the old graph still ran (memory, plans, capture).
    pub prepare: Duration,
    /// From the tear-down request to the relaunch: no frame is processed
    /// meanwhile (they wait in the ring).
    pub gap: Duration,
}

/// What the executor ran before a swap, kept alive until the old graph has
/// stopped (its kernels read these buffers) or put back if the swap fails
/// before the stop.
struct Previous {
    workload: Fragment,
    workload_plan: Option<super::executor::graph::BoundPlan>,
    fused: Option<FusedBuffers>,
    fused_chain: Option<FusedChain>,
    banks: Option<ParamBanks>,
    builtin_handler: Option<Fragment>,
    handler: Option<super::executor::graph::BoundPlan>,
    params: LoopParams,
    stage_names: Vec<String>,
}

impl ExecutorCore {
    /// Replaces the chain the resident loop runs by `next`, under parameter
    /// `generation`: prepares it while the old graph runs, stops the loop
    /// between two frames, updates or re-instantiates the graph (`mode`) and
    /// relaunches it (if it was launched). The loop's state carries over:
    /// the claimed sequence (frames that arrived meanwhile are processed
    /// next; none is lost under policy `every`), result numbering and
    /// counters. An error before the stop leaves the running chain as it
    /// was; one after it leaves the loop stopped (the appliance's watchdog
    /// reports it).
    pub fn swap_chain(
        &mut self,
        next: NextChain,
        generation: u32,
        mode: SwapMode,
    ) -> Result<SwapReport, GpuError> {
        if self.opts.style != LaunchStyle::Resident {
            return Err(GpuError::Setup("live chain changes need the resident launch style".into()));
        }
        let own_handler = self.opts.user_handler.is_some() || self.workload.data_ready_handler().is_some();
        if next.fused.is_some() && own_handler {
            return Err(GpuError::Setup(
                "a fused chain replaces the data-ready handler, and this loop runs its own; \
                 set loop.fused_chain = \"off\""
                    .into(),
            ));
        }
        if self.workload.data_ready_handler().is_some() {
            return Err(GpuError::Setup(
                "the chain registers its own data-ready handler; its changes apply on restart".into(),
            ));
        }
        let started = Instant::now();
        let next_loads_modules = next.loads_modules;
        let previous = self.install(next, generation)?;
        let old_handles = (previous.params.while_handle, previous.params.if_handle);
        let update = mode == SwapMode::Update && self.exec.is_some();
        let loads_modules = next_loads_modules;
        let captured = match update && !loads_modules {
            true => match self.capture_live(Some(old_handles)) {
                Ok(g) => Some(g),
                Err(e) => {
                    self.restore(previous);
                    return Err(e);
                }
            },
            false => None,
        };
        let prepare = started.elapsed();

        let gap_start = Instant::now();
        let was_launched = self.launched;
        if was_launched && let Err(e) = self.tear_down() {
            if self.is_wedged() {
                // The device may still read the old chain's buffers.
                std::mem::forget(previous);
            }
            return Err(e);
        }
        // Stopped: what the old chain used can be freed now (not once the
        // new graph runs: cuMemFree waits for the device to go idle).
        drop(previous);
        self.retired.clear();
        // The new chain's values are in bank 0 of its banks.
        if let Some(select) = &self.param_select {
            select.reset(select_word(generation, 0));
        }
        let captured = match captured {
            None if update && loads_modules => Some(self.capture_live(Some(old_handles))?),
            other => other,
        };
        let mut in_place = false;
        if let (Some(graph), Some(exec)) = (captured, self.exec.as_mut()) {
            match exec.update(&graph)? {
                None => {
                    in_place = true;
                    self._graph = Some(graph);
                }
                Some(why) => {
                    tracing::info!("the driver refused the in-place graph update ({why}); instantiating")
                }
            }
        }
        if !in_place {
            let graph = self.capture_live(None)?;
            let exec = graph.instantiate()?;
            self.exec = Some(exec);
            self._graph = Some(graph);
        }
        if was_launched {
            self.relaunch()?;
        }
        let gap = gap_start.elapsed();
        Ok(SwapReport { generation, banked: false, in_place, prepare, gap })
    }

    /// Whether the loop keeps its chain's values in parameter banks.
    pub fn has_banks(&self) -> bool {
        self.param_select.is_some() && self.banks.is_some()
    }

    /// Relaunches after live chain swaps since the loop was built.
    pub fn relaunches(&self) -> u64 {
        self.relaunches
    }

    /// Parameter bank switches since the loop was built.
    pub fn bank_switches(&self) -> u64 {
        self.bank_switches
    }

    /// Puts the values of `image` (the running chain's shape, other values)
    /// in force under `generation` without stopping the graph: waits until
    /// the handler took the last published bank (at most `BANK_WAIT`), writes
    /// the other one and publishes it. Frames claimed from then on run with
    /// it, and their results carry `generation`.
    pub fn switch_params(
        &mut self,
        image: &[super::fused::FusedStep],
        generation: u32,
    ) -> Result<BankSwitch, GpuError> {
        let (Some(select), Some(banks)) = (&self.param_select, &self.banks) else {
            return Err(GpuError::Setup("the loop has no parameter banks".into()));
        };
        if !banks.fits(image) {
            return Err(GpuError::Setup(format!(
                "{} parameter steps for banks of {} B: the chain's shape changed",
                image.len(),
                banks.bank_bytes()
            )));
        }
        let start = Instant::now();
        let bank = match self.launched {
            true => select.wait_writable(BANK_WAIT).ok_or_else(|| {
                GpuError::Setup(format!(
                    "the loop has not taken parameter generation {} within {BANK_WAIT:?}",
                    param_banks::generation_of(select.select())
                ))
            })?,
            false => 1 - bank_of(select.select()),
        };
        let waited = start.elapsed();
        banks.write(bank, image)?;
        let word = select_word(generation, bank);
        match self.launched {
            true => select.publish(word),
            false => select.reset(word),
        }
        self.params.param_generation = generation;
        self.bank_switches += 1;
        Ok(BankSwitch { generation, bank, waited, total: start.elapsed() })
    }

    /// Captures the resident graph, with programmatic edges if the options
    /// ask for them and the driver takes them, else plain ones.
    fn capture_live(&mut self, keep_handles: Option<(u64, u64)>) -> Result<Graph, GpuError> {
        if self.opts.programmatic_edges {
            match self.capture_resident(true, keep_handles) {
                Ok(g) => return Ok(g),
                Err(e) => {
                    tracing::warn!("the driver refused programmatic edges ({e}); capturing with plain edges")
                }
            }
        }
        self.capture_resident(false, keep_handles)
    }

    /// Allocates and plans `next` and swaps it into the executor; returns
    /// what it replaced.
    fn install(&mut self, next: NextChain, generation: u32) -> Result<Previous, GpuError> {
        let ctx = Arc::clone(&self.rt.ctx);
        let fused = match &next.fused {
            Some(chain) => Some(FusedBuffers::upload(&self.rt, chain, self.frame_ring.payload_capacity())?),
            None => None,
        };
        let banks = match (&self.param_select, &next.param_image) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(self.retire_on_error(
                    GpuError::Setup("a loop with parameter banks needs the new chain's bank image".into()),
                    Box::new(fused),
                ));
            }
            (Some(_), Some(image)) => {
                match ParamBanks::new(&ctx, image.len()).and_then(|b| b.write(0, image).map(|_| b)) {
                    Ok(b) => Some(b),
                    Err(e) => return Err(self.retire_on_error(e, Box::new(fused))),
                }
            }
        };
        let workload_plan = match next.workload.is_empty() {
            true => None,
            false => match plan_fragment(&ctx, &next.workload) {
                Ok(plan) => Some(plan),
                Err(e) => return Err(self.retire_on_error(e, Box::new((fused, banks, next.workload)))),
            },
        };
        // A [handler] keeps its fragment and plan; the built-in one follows the chain.
        let handler = if self.opts.user_handler.is_some() {
            None
        } else {
            let mut h = Fragment::new("data_ready");
            let op = match &fused {
                Some(f) => BuiltinHandler::fused_chain(Arc::clone(&self.handler_params), f.shared_bytes),
                None => BuiltinHandler::ring_ready(Arc::clone(&self.handler_params)),
            };
            let planned = h
                .add_operator(op)
                .map_err(|e| GpuError::Setup(e.to_string()))
                .and_then(|_| plan_fragment(&ctx, &h));
            match planned {
                Ok(plan) => Some((h, plan)),
                Err(e) => {
                    let allocated = Box::new((fused, banks, next.workload, workload_plan, h));
                    return Err(self.retire_on_error(e, allocated));
                }
            }
        };
        let stage_names = match (&workload_plan, &next.fused) {
            (_, Some(chain)) => vec![format!("fused chain ({})", chain.describe())],
            (Some(p), None) => p
                .plan
                .order()
                .iter()
                .filter_map(|&id| next.workload.operator_name(id).map(str::to_string))
                .collect(),
            (None, None) => Vec::new(),
        };
        let mut params = self.params;
        params.chain_flags = next.chain_flags;
        params.program = fused.as_ref().map_or(0, |f| f.program.dptr());
        params.param_generation = generation;
        if let Some(b) = &banks {
            (params.banks, params.bank_bytes) = (b.dptr(), b.bank_bytes() as u32);
        }
        let (builtin_handler, handler) = match handler {
            Some((h, plan)) => {
                (self.builtin_handler.replace(h), Some(std::mem::replace(&mut self.handler, plan)))
            }
            None => (None, None),
        };
        Ok(Previous {
            workload: std::mem::replace(&mut self.workload, next.workload),
            workload_plan: std::mem::replace(&mut self.workload_plan, workload_plan),
            fused: std::mem::replace(&mut self.fused, fused),
            fused_chain: std::mem::replace(&mut self.opts.fused, next.fused),
            banks: match banks {
                Some(b) => self.banks.replace(b),
                None => None,
            },
            builtin_handler,
            handler,
            params: std::mem::replace(&mut self.params, params),
            stage_names: std::mem::replace(&mut self.stage_names, stage_names),
        })
    }

    /// Keeps what a failed [`Self::install`] allocated until the next stop
    /// (freeing it now would wait for the running graph) and passes `e` on.
    fn retire_on_error(&mut self, e: GpuError, allocated: Box<dyn std::any::Any + Send>) -> GpuError {
        self.retired.push(allocated);
        e
    }

    /// Puts back what [`Self::install`] replaced (the old graph still runs
    /// with it). What the failed swap allocated is retired, not freed: the
    /// graph runs (see [`ExecutorCore::retired`]).
    fn restore(&mut self, previous: Previous) {
        let mut retire = |r: Box<dyn std::any::Any + Send>| self.retired.push(r);
        retire(Box::new(std::mem::replace(&mut self.workload, previous.workload)));
        retire(Box::new(std::mem::replace(&mut self.workload_plan, previous.workload_plan)));
        retire(Box::new(std::mem::replace(&mut self.fused, previous.fused)));
        self.opts.fused = previous.fused_chain;
        if let Some(b) = previous.banks {
            retire(Box::new(self.banks.replace(b)));
        }
        if let Some(plan) = previous.handler {
            retire(Box::new(std::mem::replace(&mut self.builtin_handler, previous.builtin_handler)));
            retire(Box::new(std::mem::replace(&mut self.handler, plan)));
        }
        self.params = previous.params;
        *self.handler_params.lock().unwrap_or_else(PoisonError::into_inner) = previous.params;
        self.stage_names = previous.stage_names;
    }

    /// Launches the graph again after a tear-down, continuing the loop's
    /// state: the claimed sequence, result numbering and counters stay; only
    /// the idle clock restarts, so the switch does not count towards
    /// `loop.timeout_ms`.
    fn relaunch(&mut self) -> Result<(), GpuError> {
        let c = self.control();
        c.tear_down.store(0);
        c.state.store(STATE_RUNNING);
        self.state.write(std::mem::offset_of!(DeviceLoopState, last_frame_ns), &0u64.to_ne_bytes())?;
        // The new graph's pulls (if it streams) set their own watch.
        self.state.write(std::mem::offset_of!(DeviceLoopState, pull_watch_mark), &0u64.to_ne_bytes())?;
        if let Some(select) = &self.param_select {
            let word = select.select();
            self.state.write(std::mem::offset_of!(DeviceLoopState, param_select), &word.to_ne_bytes())?;
        }
        self.relaunches += 1;
        self.upload_params()?;
        self.finished = None;
        self.launch_resident_graph()?;
        self.launched = true;
        Ok(())
    }
}

/// How long a bank switch waits for the handler to take the previous one (it
/// does between any two frames and at the end of every idle poll).
const BANK_WAIT: Duration = Duration::from_secs(1);

/// How a loop's chain is turned into a workload; what [`CudaLiveChain`]
/// needs to plan each new chain the way the loop planned its first.
#[derive(Debug, Clone)]
pub(super) struct ChainPlanning {
    pub(super) capacity: usize,
    pub(super) fused_mode: FusedChainMode,
    /// Why the chain runs one kernel per operator whatever its operators (a
    /// [handler], [output]), if so.
    pub(super) unfused: Option<String>,
    /// [output] is on: its layout follows the chain's shape.
    pub(super) output: bool,
    /// Frames stream into GPU memory while they arrive (`loop.stream_to_gpu`):
    /// the chain cannot be fused into the data-ready handler, a tiled kernel
    /// or one kernel per operator follows the pull.
    pub(super) streaming: bool,
    /// Why this loop's chain cannot change while it runs (Rust operators), if so.
    pub(super) fixed: Option<String>,
    /// How the running chain's values lie in the loop's parameter banks, if
    /// it has banks.
    pub(super) layout: Option<ParamLayout>,
}

/// Why a live change from `running` to `next` is refused, or `None` when the
/// loop can take it.
pub(super) fn refusal(planning: &ChainPlanning, running: &[OpSpec], next: &[OpSpec]) -> Option<String> {
    if let Some(why) = &planning.fixed {
        return Some(format!("{why}: chain changes apply on restart (systemctl restart frameloop)"));
    }
    if planning.output {
        let as_config = |chain: &[OpSpec]| Config { chain: chain.to_vec(), ..Config::default() };
        let change = classify(&as_config(running), &as_config(next));
        if let Some(k) = change.of(ChangeClass::Shape).next() {
            return Some(format!(
                "{} changed ({} -> {}) and [output] lays out its ring for the chain's shape: \
                 a shape change applies on restart (systemctl restart frameloop)",
                k.key, k.from, k.to
            ));
        }
    }
    None
}

/// Whether the change from `running` to `next` is one of values only that
/// the parameter banks carry ([`param_banks::bank_carries`]) and that the
/// reload diff classifies as parameters (no shape key).
pub(super) fn values_only(running: &[OpSpec], next: &[OpSpec]) -> bool {
    let as_config = |chain: &[OpSpec]| Config { chain: chain.to_vec(), ..Config::default() };
    param_banks::bank_carries(running, next)
        && classify(&as_config(running), &as_config(next)).of(ChangeClass::Shape).next().is_none()
}

/// The CUDA loop's [`LiveChain`]: plans each new chain on the caller's
/// thread, then swaps it into the executor ([`ExecutorCore::swap_chain`]).
/// It holds the executor weakly: once the loop is dropped, a change is refused.
pub struct CudaLiveChain {
    pub(super) exec: Weak<Mutex<ResidentExecutor>>,
    pub(super) planning: ChainPlanning,
    pub(super) running: Vec<OpSpec>,
    pub(super) applied: u32,
    pub(super) mode: SwapMode,
    /// Values-only changes go to the parameter banks (where the loop has them).
    pub(super) use_banks: bool,
}

impl CudaLiveChain {
    /// How later swaps rebuild the graph ([`SwapMode::Update`] by default).
    pub fn set_mode(&mut self, mode: SwapMode) {
        self.mode = mode;
    }

    /// Whether values-only changes go to the parameter banks (the default)
    /// or rebuild the graph like shape changes (to compare the two).
    pub fn set_banks(&mut self, use_banks: bool) {
        self.use_banks = use_banks;
    }

    /// Swaps `chain` in under `generation` and says how; what
    /// [`LiveChain::stage`] does.
    pub fn swap(&mut self, chain: &[OpSpec], generation: u32) -> Result<SwapReport, ChainError> {
        let refused =
            |why: String| ChainError::Backend(format!("the cuda backend cannot apply it live: {why}"));
        if let Some(why) = refusal(&self.planning, &self.running, chain) {
            return Err(refused(why));
        }
        let exec = self.exec.upgrade().ok_or_else(|| refused("the resident loop is gone".into()))?;
        let mut exec = exec.lock().unwrap_or_else(PoisonError::into_inner);
        let p = &self.planning;
        let banked = self.use_banks && exec.has_banks() && values_only(&self.running, chain);
        if let Some(layout) = p.layout.filter(|_| banked) {
            let switched = param_banks::image(layout, chain, None, p.capacity)
                .and_then(|image| exec.switch_params(&image, generation));
            match switched {
                Ok(s) => {
                    tracing::info!(
                        "cuda loop: generation {generation} running (parameter bank {}, written and published in \
                         {:.0} µs; the graph kept running)",
                        s.bank,
                        s.total.as_secs_f64() * 1e6
                    );
                    self.running = chain.to_vec();
                    self.applied = generation;
                    return Ok(SwapReport {
                        generation,
                        banked: true,
                        in_place: true,
                        prepare: s.total,
                        gap: Duration::ZERO,
                    });
                }
                Err(e) => tracing::warn!("parameter bank switch refused ({e}); rebuilding the graph instead"),
            }
        }
        let (workload, fused, layout) = super::cuda_loop::plan_chain(
            &exec.rt,
            chain,
            p.capacity,
            p.fused_mode,
            p.unfused.as_deref(),
            p.streaming,
        )
        .map_err(|e| refused(e.to_string()))?;
        let param_image = match exec.has_banks() {
            true => Some(
                param_banks::image(layout, chain, fused.as_ref(), p.capacity)
                    .map_err(|e| refused(e.to_string()))?,
            ),
            false => None,
        };
        let loads_modules = chain.iter().any(|op| matches!(op, OpSpec::Kernel(_)));
        if loads_modules {
            super::user_kernel::compile_ahead(&exec.rt.ctx, chain).map_err(|e| refused(e.to_string()))?;
        }
        let next = NextChain {
            workload,
            fused,
            chain_flags: super::executor::graph::chain_flags(chain),
            param_image,
            loads_modules,
        };
        let report = exec.swap_chain(next, generation, self.mode).map_err(|e| refused(e.to_string()))?;
        if exec.has_banks() {
            self.planning.layout = Some(layout);
        }
        tracing::info!(
            "cuda loop: generation {generation} running ({}; {:.0} µs without processing, {:.0} µs prepared \
             while the old chain ran)",
            if report.in_place { "graph updated in place" } else { "graph instantiated anew" },
            report.gap.as_secs_f64() * 1e6,
            report.prepare.as_secs_f64() * 1e6,
        );
        self.running = chain.to_vec();
        self.applied = generation;
        Ok(report)
    }
}

impl LiveChain for CudaLiveChain {
    fn stage(&mut self, chain: &[OpSpec], generation: u32) -> Result<(), Vec<ChainError>> {
        self.swap(chain, generation).map(|_| ()).map_err(|e| vec![e])
    }

    fn applied_generation(&self) -> u32 {
        self.applied
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::default_chain;

    fn planning(output: bool, fixed: Option<&str>) -> ChainPlanning {
        ChainPlanning {
            capacity: 4096,
            fused_mode: FusedChainMode::Auto,
            unfused: None,
            output,
            streaming: false,
            fixed: fixed.map(str::to_string),
            layout: None,
        }
    }

    #[test]
    fn only_value_changes_take_the_bank_path() {
        let running = default_chain();
        let mut level = default_chain();
        level[3] = OpSpec::Threshold { level: 1.5 };
        assert!(values_only(&running, &level));
        assert!(values_only(&running, &running));
        let mut taps = default_chain();
        taps[1] = OpSpec::Fir { taps: vec![1.0; 3] };
        assert!(!values_only(&running, &taps));
        let mut added = default_chain();
        added.insert(2, OpSpec::Delay { us: 3 });
        assert!(!values_only(&running, &added));
    }

    #[test]
    fn parameter_and_shape_changes_are_taken_without_output() {
        let running = default_chain();
        let mut params = default_chain();
        params[3] = OpSpec::Threshold { level: 1.5 };
        let mut shape = default_chain();
        shape.insert(2, OpSpec::Delay { us: 3 });
        assert_eq!(refusal(&planning(false, None), &running, &params), None);
        assert_eq!(refusal(&planning(false, None), &running, &shape), None);
    }

    #[test]
    fn with_output_only_parameter_changes_are_taken_and_the_refusal_names_the_key() {
        let running = default_chain();
        let mut params = default_chain();
        params[1] = OpSpec::Fir { taps: vec![0.1, 0.2, 0.4, 0.2, 0.1] };
        assert_eq!(refusal(&planning(true, None), &running, &params), None);
        let mut taps = default_chain();
        taps[1] = OpSpec::Fir { taps: vec![1.0; 3] };
        let why = refusal(&planning(true, None), &running, &taps).expect("a tap count is a shape change");
        assert!(why.contains("chain[1].taps") && why.contains("[output]"), "{why}");
        let mut removed = default_chain();
        removed.remove(1);
        assert!(refusal(&planning(true, None), &running, &removed).is_some());
    }

    #[test]
    fn a_fixed_chain_refuses_every_change_and_says_how_to_apply_it() {
        let mut params = default_chain();
        params[3] = OpSpec::Threshold { level: 1.5 };
        let why = refusal(&planning(false, Some("the chain has Rust operators")), &default_chain(), &params)
            .expect("refused");
        assert!(why.contains("Rust operators") && why.contains("systemctl restart"), "{why}");
    }
}
