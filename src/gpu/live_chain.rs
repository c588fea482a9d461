//! The CUDA loop's live chain handle ([`CudaLiveChain`], the reload path's
//! [`LiveChain`]): it decides whether a new chain can be taken live, plans it
//! the way the loop planned its first (`chain_plan`), and hands it
//! to the executor: a change of the built-in operators' values only goes to
//! the loop's parameter banks ([`super::param_banks`]): no stop, no
//! relaunch; any other change is swapped in between two frames
//! ([`ResidentExecutor::swap_chain`]).

use super::chain_plan::plan_chain;
use super::executor::{NextChain, ResidentExecutor, SwapMode, SwapReport, chain_flags};
use super::param_banks::{self, ParamLayout};
use crate::backend::LiveChain;
use crate::config::{Config, FusedChainMode};
use crate::ops::{ChainError, OpSpec};
use crate::reload::{ChangeClass, classify};
use std::sync::{Mutex, PoisonError, Weak};
use std::time::Duration;

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
/// thread, then swaps it into the executor ([`ResidentExecutor::swap_chain`]).
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
        let (workload, fused, layout) =
            plan_chain(exec.runtime(), chain, p.capacity, p.fused_mode, p.unfused.as_deref(), p.streaming)
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
            super::user::kernel::compile_ahead(&exec.runtime().ctx, chain)
                .map_err(|e| refused(e.to_string()))?;
        }
        let next = NextChain { workload, fused, chain_flags: chain_flags(chain), param_image, loads_modules };
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
