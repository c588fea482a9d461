//! The executor's side of live chain changes: what a swap is given
//! ([`NextChain`]) and reports ([`SwapReport`]), and the state a running
//! loop keeps for changes ([`LiveState`]): its parameter banks, the
//! resources a change replaced while the graph ran, and the counters. A
//! change of the built-in operators' values only goes to the parameter banks
//! ([`crate::gpu::param_banks`], [`LiveState::switch_params`]): no stop, no
//! relaunch; any other change is swapped in by the executor
//! ([`super::ResidentExecutor::swap_chain`]).

use crate::fragment::Fragment;
use crate::gpu::GpuError;
use crate::gpu::fused::{FusedChain, FusedStep};
use crate::gpu::param_banks::{self, BankSwitch, ParamBanks, ParamSelect, bank_of, select_word};
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A chain prepared for [`super::ResidentExecutor::swap_chain`].
pub struct NextChain {
    /// The main fragment: one kernel per operator, or empty with `fused`.
    pub workload: Fragment,
    /// The fused chain the handler runs itself, if the chain is fused.
    pub fused: Option<FusedChain>,
    /// `RESULT_HAS_*` flags of the chain.
    pub chain_flags: u32,
    /// The chain's parameter bank image, for a loop with banks.
    pub param_image: Option<Vec<FusedStep>>,
    /// The workload loads modules when it is captured (user kernels): a
    /// module load waits for the running graph, which never ends by itself,
    /// so such a workload is captured once the old graph stopped (compile
    /// the sources first, [`crate::gpu::user::kernel::compile_ahead`], so that
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

/// How long a bank switch waits for the handler to take the previous one (it
/// does between any two frames and at the end of every idle poll).
const BANK_WAIT: Duration = Duration::from_secs(1);

/// What a running loop keeps for live chain changes.
pub(super) struct LiveState {
    /// Device resources a live chain change replaced while the graph ran:
    /// freeing device memory (`cuMemFree`) waits for the whole device to go
    /// idle, which a resident graph never does, so they are freed at the
    /// loop's next stop.
    retired: Vec<Box<dyn std::any::Any + Send>>,
    /// The parameter banks' control block, when the loop has banks.
    param_select: Option<ParamSelect>,
    /// The current chain's parameter banks (with `param_select`).
    banks: Option<ParamBanks>,
    /// Relaunches after a live chain swap, and parameter bank switches.
    relaunches: u64,
    bank_switches: u64,
}

impl LiveState {
    /// Banks holding `image` in bank 0, selected under generation 0, when
    /// `image` is given; else a loop without banks.
    pub(super) fn new(ctx: &Arc<CudaContext>, image: Option<&[FusedStep]>) -> Result<Self, GpuError> {
        let (param_select, banks) = match image {
            Some(image) => {
                let banks = ParamBanks::new(ctx, image.len())?;
                banks.write(0, image)?;
                let select = ParamSelect::new(ctx)?;
                select.reset(select_word(0, 0));
                (Some(select), Some(banks))
            }
            None => (None, None),
        };
        Ok(Self { retired: Vec::new(), param_select, banks, relaunches: 0, bank_switches: 0 })
    }

    /// Device address of the banks' control block (0 without banks).
    pub(super) fn select_dptr(&self) -> u64 {
        self.param_select.as_ref().map_or(0, |s| s.dptr())
    }

    /// The banks (without, `None`).
    pub(super) fn banks(&self) -> Option<&ParamBanks> {
        self.banks.as_ref()
    }

    /// Whether the loop keeps its chain's values in parameter banks.
    pub(super) fn has_banks(&self) -> bool {
        self.param_select.is_some() && self.banks.is_some()
    }

    /// Relaunches after live chain swaps since the loop was built.
    pub(super) fn relaunches(&self) -> u64 {
        self.relaunches
    }

    /// Counts one relaunch.
    pub(super) fn count_relaunch(&mut self) {
        self.relaunches += 1;
    }

    /// Parameter bank switches since the loop was built.
    pub(super) fn bank_switches(&self) -> u64 {
        self.bank_switches
    }

    /// Before a launch (no frame runs): the selection as it stands, with
    /// its acknowledgement reset; 0 without banks.
    pub(super) fn selection_for_launch(&self) -> u64 {
        self.param_select.as_ref().map_or(0, |s| {
            s.reset(s.select());
            s.select()
        })
    }

    /// The selection in force (for a relaunch), if the loop has banks.
    pub(super) fn selection(&self) -> Option<u64> {
        self.param_select.as_ref().map(ParamSelect::select)
    }

    /// With the loop stopped after a swap: the new chain's values are in
    /// bank 0 of its banks, under `generation`.
    pub(super) fn select_first_bank(&self, generation: u32) {
        if let Some(select) = &self.param_select {
            select.reset(select_word(generation, 0));
        }
    }

    /// The banks of a new chain holding `image` in bank 0, for a loop with
    /// banks (`Ok(None)` for a loop without).
    pub(super) fn banks_for(
        &self,
        ctx: &Arc<CudaContext>,
        image: Option<&[FusedStep]>,
    ) -> Result<Option<ParamBanks>, GpuError> {
        match (&self.param_select, image) {
            (None, _) => Ok(None),
            (Some(_), None) => {
                Err(GpuError::Setup("a loop with parameter banks needs the new chain's bank image".into()))
            }
            (Some(_), Some(image)) => {
                ParamBanks::new(ctx, image.len()).and_then(|b| b.write(0, image).map(|_| b)).map(Some)
            }
        }
    }

    /// Puts `banks` in force and returns the ones they replace.
    pub(super) fn replace_banks(&mut self, banks: ParamBanks) -> Option<ParamBanks> {
        self.banks.replace(banks)
    }

    /// Keeps `resources` until the loop's next stop (freeing them now would
    /// wait for the running graph).
    pub(super) fn retire(&mut self, resources: Box<dyn std::any::Any + Send>) {
        self.retired.push(resources);
    }

    /// With the loop stopped: frees what was retired.
    pub(super) fn free_retired(&mut self) {
        self.retired.clear();
    }

    /// Puts the values of `image` (the running chain's shape, other values)
    /// in force under `generation` without stopping the graph: waits until
    /// the handler took the last published bank (at most `BANK_WAIT`, when
    /// the loop is `launched`), writes the other one and publishes it.
    pub(super) fn switch_params(
        &mut self,
        image: &[FusedStep],
        generation: u32,
        launched: bool,
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
        let bank = match launched {
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
        match launched {
            true => select.publish(word),
            false => select.reset(word),
        }
        self.bank_switches += 1;
        Ok(BankSwitch { generation, bank, waited, total: start.elapsed() })
    }
}
