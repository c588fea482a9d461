//! The main fragment of a configured chain: one GPU operator per chain
//! entry (a stats next to a threshold fused when asked), linked `out ->
//! in`, with a place for callers to insert their own operators. Generic:
//! each operator's launch code is in its own module.

use super::delay::DelayOp;
use super::fft::FftOp;
use super::filter2d::Filter2dOp;
use super::fir::FirOp;
use super::launch::sample_bytes;
use super::reduce::{ReduceOp, Reduction};
use super::stage::StagePayloadOp;
use super::unpack::UnpackOp;
use crate::fragment::{Fragment, FragmentError, OperatorId};
use crate::gpu::param_banks::NO_PARAM_STEP;
use crate::ops::{OpSpec, validate_chain};

/// How [`build_main_fragment`] lays the chain out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainLayout {
    /// Run a stats next to a threshold as one kernel (one pass, one graph node fewer).
    pub fuse_reductions: bool,
    /// Append a [`DelayOp`] of this many ns (0: none).
    pub delay_ns: u64,
}

impl Default for ChainLayout {
    fn default() -> Self {
        Self { fuse_reductions: true, delay_ns: 0 }
    }
}

/// How the chain reads the frame in the mapped ring slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum PayloadPath {
    /// The unpack kernel reads the slot over the bus (16-byte loads, all in
    /// flight at once). Measured faster for 8 KiB frames on an H200
    /// (results archive: bench/results/gpu-latency-h200.txt), so the default.
    #[default]
    ZeroCopy,
    /// A [`StagePayloadOp`] copies the slot into device memory first.
    OneCopy,
}

/// Builds the main fragment for a configured chain and frames of at most
/// `max_frame_bytes`: one operator per chain entry (a stats next to a
/// threshold fused when asked), linked `out -> in`. Operators are named
/// `"<op>[<chain index>]"`, e.g. `fir[1]` or `stats+threshold[2]`; a user
/// kernel by its entry, `chain[2] kernel "beamform"`. User kernel sources
/// are read as they stand when the graph is built (see
/// [`crate::gpu::user::kernel::with_sources_resolved`]).
pub fn build_main_fragment(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
) -> Result<Fragment, FragmentError> {
    build_main_fragment_with(chain, max_frame_bytes, layout, PayloadPath::ZeroCopy)
}

/// [`build_main_fragment`] with a choice of payload path; with
/// [`PayloadPath::OneCopy`] a `stage` operator comes first.
pub fn build_main_fragment_with(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
    payload: PayloadPath,
) -> Result<Fragment, FragmentError> {
    build_main_fragment_around(chain, max_frame_bytes, layout, payload, &[], |point, _| {
        Ok::<_, FragmentError>(point.tail)
    })
}

/// Where [`build_main_fragment_around`] lets its caller add operators: after
/// the operator of chain entry `index`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InsertionPoint {
    /// The chain entry just added.
    pub index: usize,
    /// Samples its output holds at most (its `out` port is that many f32s).
    pub samples: usize,
    /// The operator whose `out` the next operator's `in` is linked to.
    pub tail: OperatorId,
}

/// [`build_main_fragment_with`], calling `insert` after each chain entry's
/// operator; `insert` may add operators linked behind `tail` and returns the
/// new tail. A stats and a threshold are not fused across an index listed in
/// `split_after`, so that operators inserted there run between them.
pub fn build_main_fragment_around<E: From<FragmentError>>(
    chain: &[OpSpec],
    max_frame_bytes: usize,
    layout: ChainLayout,
    payload: PayloadPath,
    split_after: &[usize],
    mut insert: impl FnMut(InsertionPoint, &mut Fragment) -> Result<OperatorId, E>,
) -> Result<Fragment, E> {
    validate_chain(chain).map_err(FragmentError::InvalidChain)?;
    let OpSpec::Unpack { format, .. } = chain[0] else { unreachable!("validate_chain puts unpack first") };
    // Samples flowing between operators: the unpacked frame, then the spectrum after an fft.
    let mut max_samples = format.samples_in(max_frame_bytes);
    let mut fragment = Fragment::new("main");
    let mut previous = match payload {
        PayloadPath::ZeroCopy => None,
        PayloadPath::OneCopy => Some(fragment.add_operator(StagePayloadOp::new("stage", max_frame_bytes))?),
    };
    let mut user_kernels = crate::gpu::user::kernel::UserKernels::new();
    // Operator i's values in the parameter bank: one FusedStep per operator
    // of the chain (crate::gpu::param_banks::per_operator_image).
    let step = |i: usize| u32::try_from(i).unwrap_or(NO_PARAM_STEP);
    let mut i = 0;
    while i < chain.len() {
        let name = |op: &str| format!("{op}[{i}]");
        let next = chain.get(i + 1);
        let (id, consumed) = match &chain[i] {
            OpSpec::Unpack { format, scale, offset } => {
                let (name, f, s, o) = (&name("unpack"), *format, *scale, *offset);
                let op = match payload {
                    PayloadPath::ZeroCopy => UnpackOp::new(name, f, s, o, max_frame_bytes),
                    PayloadPath::OneCopy => UnpackOp::after_stage(name, f, s, o, max_frame_bytes),
                };
                (fragment.add_operator(op.with_param_step(step(i)))?, 1)
            }
            OpSpec::Fir { taps } => {
                let op = FirOp::fir(&name("fir"), taps, max_samples)?;
                (fragment.add_operator(op.with_param_step(step(i)))?, 1)
            }
            OpSpec::Filter2d { width, kernel } => {
                let op = Filter2dOp::filter2d(&name("filter2d"), *width, *kernel, max_samples)?;
                (fragment.add_operator(op.with_param_step(step(i)))?, 1)
            }
            OpSpec::Fft(spec) => {
                let op = FftOp::new(&name("fft"), spec, max_samples)?;
                max_samples = op.max_output_samples();
                (fragment.add_operator(op)?, 1)
            }
            OpSpec::Delay { us } => {
                let op = DelayOp::new(&name("delay"), *us as u64 * 1000, sample_bytes(max_samples));
                (fragment.add_operator(op.with_param_step(step(i)))?, 1)
            }
            OpSpec::Kernel(k) => {
                let name = format!("chain[{i}] kernel \"{}\"", k.entry);
                let op = user_kernels.next(&name, k, max_samples)?.with_param_step(step(i));
                max_samples = op.max_output_samples();
                (fragment.add_operator(op)?, 1)
            }
            OpSpec::Stats | OpSpec::Threshold { .. } => {
                let (reduction, consumed) = match (&chain[i], next) {
                    (OpSpec::Stats, Some(OpSpec::Threshold { level }))
                    | (OpSpec::Threshold { level }, Some(OpSpec::Stats))
                        if layout.fuse_reductions && !split_after.contains(&i) =>
                    {
                        (Reduction::StatsThreshold { level: *level }, 2)
                    }
                    (OpSpec::Stats, _) => (Reduction::Stats, 1),
                    (OpSpec::Threshold { level }, _) => (Reduction::Threshold { level: *level }, 1),
                    _ => unreachable!("matched above"),
                };
                let label = match reduction {
                    Reduction::Stats => "stats",
                    Reduction::Threshold { .. } => "threshold",
                    Reduction::StatsThreshold { .. } => "stats+threshold",
                };
                // The level is the threshold's, wherever it stands in the pair.
                let level_at = if matches!(chain[i], OpSpec::Threshold { .. }) { i } else { i + 1 };
                let param_step =
                    if matches!(reduction, Reduction::Stats) { NO_PARAM_STEP } else { step(level_at) };
                let op = ReduceOp::new(&name(label), reduction, max_samples);
                (fragment.add_operator(op.with_param_step(param_step))?, consumed)
            }
        };
        if let Some(prev) = previous {
            fragment.add_flow(prev, "out", id, "in")?;
        }
        let mut tail = id;
        for index in i..i + consumed {
            tail = insert(InsertionPoint { index, samples: max_samples, tail }, &mut fragment)?;
        }
        previous = Some(tail);
        i += consumed;
    }
    if layout.delay_ns > 0 {
        let id = fragment.add_operator(DelayOp::new("delay", layout.delay_ns, sample_bytes(max_samples)))?;
        fragment.add_flow(previous.expect("the chain is not empty"), "out", id, "in")?;
    }
    Ok(fragment)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::PortDirection;
    use crate::fragment::PortMemory;
    use crate::gpu::operators::reduce::REDUCE_SCRATCH_BYTES;
    use crate::ops::{SampleFormat, default_chain};

    fn names(f: &Fragment) -> Vec<String> {
        let plan = f.plan().unwrap();
        plan.order().iter().map(|&id| f.operator_name(id).unwrap().to_owned()).collect()
    }

    #[test]
    fn default_chain_fuses_its_reductions_and_plans_two_buffers() {
        let f = build_main_fragment(&default_chain(), 8192, ChainLayout::default()).unwrap();
        assert_eq!(names(&f), ["unpack[0]", "fir[1]", "stats+threshold[2]"]);
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        assert_eq!(plan.buffers().len(), 2);
        assert_eq!(plan.allocated_bytes(), 2 * 4096 * 4);
        // The chain's output is the FIR's buffer, passed through by the reduction.
        let last = *plan.order().last().unwrap();
        let fir = plan.order()[1];
        assert_eq!(
            plan.port_buffer(last, "out", PortDirection::Output),
            plan.port_buffer(fir, "out", PortDirection::Output)
        );
    }

    #[test]
    fn unfused_chain_with_every_operator_and_a_delay() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 1.0, offset: 0.0 },
            OpSpec::Threshold { level: 1.0 },
            OpSpec::Filter2d { width: 7, kernel: [1.0; 9] },
            OpSpec::Fir { taps: vec![1.0; 3] },
            OpSpec::Stats,
        ];
        let layout = ChainLayout { fuse_reductions: false, delay_ns: 5_000 };
        let f = build_main_fragment(&chain, 3000, layout).unwrap();
        assert_eq!(names(&f), ["unpack[0]", "threshold[1]", "filter2d[2]", "fir[3]", "stats[4]", "delay"]);
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        // unpack->threshold->filter2d share one, then filter2d->fir, fir->stats->delay.
        assert_eq!(plan.buffers().len(), 3);
        assert!(plan.buffers().iter().all(|b| b.bytes == 2000 * 4));
    }

    #[test]
    fn invalid_chains_are_refused_with_the_chain_errors() {
        let err = build_main_fragment(&[OpSpec::Stats], 64, ChainLayout::default()).unwrap_err();
        assert!(err.to_string().contains("must start with op = \"unpack\""), "{err}");
        assert!(FirOp::fir("fir", &[1.0, 2.0], 8).is_err());
        assert!(Filter2dOp::filter2d("f2d", 0, [0.0; 9], 8).is_err());
    }

    #[test]
    fn only_reductions_over_large_frames_declare_a_scratch() {
        let scratch = |max_samples| {
            let mut f = Fragment::new("t");
            let id = f.add_operator(ReduceOp::new("r", Reduction::Stats, max_samples)).unwrap();
            f.operator_spec(id).unwrap().port("scratch", PortDirection::Output).map(|p| p.memory.clone())
        };
        assert_eq!(scratch(crate::gpu::operators::reduce::REDUCE_ONE_BLOCK_SAMPLES), None);
        assert_eq!(
            scratch(crate::gpu::operators::reduce::REDUCE_ONE_BLOCK_SAMPLES + 1),
            Some(PortMemory::Size(REDUCE_SCRATCH_BYTES))
        );
        // A large chain plans the scratch as a buffer of its own, used by nothing else.
        let f = build_main_fragment(&default_chain(), 1 << 20, ChainLayout::default()).unwrap();
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        let last = *plan.order().last().unwrap();
        let b = plan.port_buffer(last, "scratch", PortDirection::Output).unwrap();
        assert_eq!(plan.buffers()[b].bytes, REDUCE_SCRATCH_BYTES);
        assert_eq!(plan.buffers()[b].users, ["stats+threshold[2].scratch"]);
    }

    #[test]
    fn the_fft_plans_its_scratch_ports_and_resizes_the_chain_after_it() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Fir { taps: vec![1.0] },
            OpSpec::Fft(crate::ops::FftSpec::new(256)),
            OpSpec::Stats,
        ];
        // 3000 samples: 11 rows of 256, 11 * 129 = 1419 bins.
        let f = build_main_fragment(&chain, 6000, Default::default()).unwrap();
        let plan = f.plan().unwrap();
        assert!(plan.diagnostics().is_empty(), "{:?}", plan.diagnostics());
        let mut sizes: Vec<usize> = plan.buffers().iter().map(|b| b.bytes).collect();
        sizes.sort();
        assert_eq!(sizes, vec![4, 1419 * 4, 2816 * 4, 1419 * 8, 3000 * 4, 3000 * 4]);
    }
}
