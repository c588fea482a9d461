//! The fused chain: a chain of built-in operators encoded as steps that one
//! block runs inside the data-ready handler's own kernel (`fl_fused_chain`,
//! kernels/fused.cu), so a frame costs one kernel instead of handler → IF →
//! one kernel per operator. The layout mirrors `FusedStep`/`FusedProgram` in
//! `handlers/ring.cuh` (checked by the layout test). For frames too large
//! for one block's shared memory, [`tiled`] runs the same program over
//! tiles with many blocks.

pub mod tiled;

use crate::config::FusedChainMode;
use crate::ops::{MAX_FIR_TAPS, OpSpec, SampleFormat};
use thiserror::Error;

/// Steps a fused program holds (`FL_FUSED_MAX_STEPS`).
pub const FUSED_MAX_STEPS: usize = 16;
/// Coefficients a step holds (`FL_FUSED_COEFFS`): FIR taps or a 3x3 kernel.
pub const FUSED_COEFFS: usize = 64;
/// Threads of the fused kernel's one block (`FL_FUSED_THREADS`).
pub const FUSED_THREADS: u32 = 1024;

/// `FusedStep::kind` values (`FL_STEP_*`).
pub mod step {
    pub const UNPACK_U8: u32 = 1;
    pub const UNPACK_U16: u32 = 2;
    pub const UNPACK_U12: u32 = 3;
    pub const FIR: u32 = 4;
    pub const FILTER2D: u32 = 5;
    pub const STATS: u32 = 6;
    pub const THRESHOLD: u32 = 7;
    pub const STATS_THRESHOLD: u32 = 8;
    pub const DELAY: u32 = 9;
    /// Diagnostic: faults (an illegal write) once the frame's ring sequence
    /// reaches `count`; for tests of fault reporting, never built from a config.
    pub const FAULT_AT: u32 = 10;
}

/// One operator of the fused chain (device memory, read by every thread).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedStep {
    /// A [`step`] constant.
    pub kind: u32,
    /// Buffer the step reads (0 or 1; unused by unpack and delay).
    pub input: u32,
    /// Buffer the step writes (unpack, fir, filter2d).
    pub output: u32,
    /// FIR: number of taps; filter2d: row width.
    pub count: u32,
    /// Unpack: scale; threshold: level.
    pub a: f32,
    /// Unpack: offset.
    pub b: f32,
    pub delay_ns: u64,
    /// FIR taps, or the 3x3 kernel row-major; zero after the used ones.
    pub coeffs: [f32; FUSED_COEFFS],
}

impl FusedStep {
    /// A step of no kind and no values.
    pub fn empty() -> Self {
        Self::new(0)
    }

    fn new(kind: u32) -> Self {
        Self { kind, input: 0, output: 0, count: 0, a: 0.0, b: 0.0, delay_ns: 0, coeffs: [0.0; FUSED_COEFFS] }
    }
}

/// The whole fused chain as the kernel reads it.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusedProgram {
    /// Invariant: at most [`FUSED_MAX_STEPS`].
    pub step_count: u32,
    /// Floats each of the two buffers holds.
    pub capacity: u32,
    /// 0, or bytes of the slot payload the kernel first copies into shared
    /// memory (while thread 0 reads the slot header: one PCIe round trip for both).
    pub stage_bytes: u32,
    /// 1: the two buffers live in dynamic shared memory after the staged payload.
    pub shared_buffers: u32,
    /// Device addresses of the two ping-pong sample buffers (0 until bound).
    pub buffers: [u64; 2],
    pub steps: [FusedStep; FUSED_MAX_STEPS],
}

const _: () = {
    assert!(std::mem::size_of::<FusedStep>() == 288);
    assert!(std::mem::size_of::<FusedProgram>() == 32 + FUSED_MAX_STEPS * 288);
};

/// Why a chain runs as a graph of kernels rather than fused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum NotFused {
    #[error("loop.fused_chain = \"off\"")]
    Off,
    #[error(
        "the chain has {0} steps after merging stats and threshold; the fused kernel takes {FUSED_MAX_STEPS}"
    )]
    TooManySteps(usize),
    #[error(
        "the chain's two sample buffers ({buffers} B) do not fit in the {shared_limit} B of shared memory one block may use, and loop.fused_chain = \"auto\" fuses only then (one block is slower than a kernel per operator on frames that large); set it to \"on\" to fuse anyway"
    )]
    LargeFrames { buffers: usize, shared_limit: usize },
    #[error("stage markers name each operator's kernel, and a fused chain has only one")]
    StageMarkers,
    #[error("the chain does not start with unpack")]
    NoUnpack,
    #[error("chain[{index}] is an \"fft\" operator, which runs on cuFFT and not in the fused kernel")]
    Fft { index: usize },
    #[error("user kernel \"{0}\" runs as a kernel of its own")]
    UserKernel(String),
}

/// A chain encoded for the fused kernel, with the buffer size it needs.
#[derive(Debug, Clone, PartialEq)]
pub struct FusedChain {
    /// `buffers` are still 0: the executor allocates and binds them.
    pub program: Box<FusedProgram>,
    /// Names of the steps, for logs and fault messages.
    pub names: Vec<&'static str>,
}

impl FusedChain {
    /// Encodes a validated `chain` (it starts with unpack; an empty chain
    /// only publishes the frame's metadata) for slots of `payload_capacity` bytes. Stats directly followed by threshold (or the
    /// reverse) become one pass, as in the kernel-per-operator graph.
    pub fn encode(chain: &[OpSpec], payload_capacity: usize) -> Result<Self, NotFused> {
        let capacity = match chain.first() {
            None => 1,
            Some(OpSpec::Unpack { format, .. }) => format.samples_in(payload_capacity).max(1),
            Some(_) => return Err(NotFused::NoUnpack),
        };
        let mut steps: Vec<FusedStep> = Vec::new();
        let mut names = Vec::new();
        // The buffer holding the current samples.
        let mut current = 0u32;
        if let Some(index) = chain.iter().position(|op| matches!(op, OpSpec::Fft(_))) {
            return Err(NotFused::Fft { index });
        }
        let mut ops = chain.iter().peekable();
        while let Some(op) = ops.next() {
            let mut s;
            match op {
                OpSpec::Unpack { format, scale, offset } => {
                    s = FusedStep::new(match format {
                        SampleFormat::U8 => step::UNPACK_U8,
                        SampleFormat::U16 => step::UNPACK_U16,
                        SampleFormat::U12 => step::UNPACK_U12,
                    });
                    (s.a, s.b, s.output) = (*scale, *offset, 0);
                    current = 0;
                }
                OpSpec::Fir { taps } => {
                    s = FusedStep::new(step::FIR);
                    let n = taps.len().min(MAX_FIR_TAPS);
                    s.coeffs[..n].copy_from_slice(&taps[..n]);
                    s.count = n as u32;
                    (s.input, s.output) = (current, 1 - current);
                    current = 1 - current;
                }
                OpSpec::Filter2d { width, kernel } => {
                    s = FusedStep::new(step::FILTER2D);
                    s.coeffs[..9].copy_from_slice(kernel);
                    s.count = *width;
                    (s.input, s.output) = (current, 1 - current);
                    current = 1 - current;
                }
                OpSpec::Stats | OpSpec::Threshold { .. } => {
                    let partner = match (op, ops.peek()) {
                        (OpSpec::Stats, Some(OpSpec::Threshold { level })) => Some(*level),
                        (OpSpec::Threshold { .. }, Some(OpSpec::Stats)) => Some(0.0),
                        _ => None,
                    };
                    let level = match op {
                        OpSpec::Threshold { level } => *level,
                        _ => partner.unwrap_or(0.0),
                    };
                    let kind = match (op, partner) {
                        (_, Some(_)) => step::STATS_THRESHOLD,
                        (OpSpec::Stats, None) => step::STATS,
                        _ => step::THRESHOLD,
                    };
                    if partner.is_some() {
                        ops.next();
                        names.push("stats+threshold");
                    }
                    s = FusedStep::new(kind);
                    (s.a, s.input) = (level, current);
                }
                OpSpec::Delay { us } => {
                    s = FusedStep::new(step::DELAY);
                    s.delay_ns = u64::from(*us) * 1000;
                }
                OpSpec::Fft(_) => unreachable!("chains with an fft were refused above"),
                OpSpec::Kernel(k) => return Err(NotFused::UserKernel(k.entry.clone())),
            }
            if s.kind != step::STATS_THRESHOLD {
                names.push(op.name());
            }
            steps.push(s);
        }
        if steps.len() > FUSED_MAX_STEPS {
            return Err(NotFused::TooManySteps(steps.len()));
        }
        let mut program = Box::new(FusedProgram {
            step_count: steps.len() as u32,
            capacity: u32::try_from(capacity).unwrap_or(u32::MAX),
            stage_bytes: 0,
            shared_buffers: 0,
            buffers: [0; 2],
            steps: [FusedStep::new(0); FUSED_MAX_STEPS],
        });
        program.steps[..steps.len()].copy_from_slice(&steps);
        debug_assert!(program.step_count as usize <= FUSED_MAX_STEPS);
        Ok(Self { program, names })
    }

    /// Appends the diagnostic [`step::FAULT_AT`] step, which faults on the
    /// frame with ring sequence `ring_seq` and every later one (tests of
    /// fault reporting).
    pub fn push_fault_at(&mut self, ring_seq: u32) -> Result<(), NotFused> {
        let n = self.program.step_count as usize;
        if n == FUSED_MAX_STEPS {
            return Err(NotFused::TooManySteps(n + 1));
        }
        let mut s = FusedStep::new(step::FAULT_AT);
        s.count = ring_seq;
        self.program.steps[n] = s;
        self.program.step_count += 1;
        self.names.push("fault_at");
        Ok(())
    }

    /// Bytes of each of the two sample buffers.
    pub fn buffer_bytes(&self) -> usize {
        self.program.capacity as usize * std::mem::size_of::<f32>()
    }

    /// Places the two sample buffers, and a staged copy of slots of
    /// `payload_capacity` bytes, in shared memory where they fit in
    /// `shared_limit` bytes (the device's opt-in maximum per block less the
    /// kernel's static shared memory): both if they fit, else the buffers,
    /// else the staged payload, else neither. Returns the dynamic shared
    /// memory the kernel then needs.
    pub fn place_in_shared(&mut self, payload_capacity: usize, shared_limit: usize) -> usize {
        let stage = if self.program.step_count == 0 { 0 } else { payload_capacity.next_multiple_of(16) };
        let buffers = 2 * self.buffer_bytes();
        let (stage, shared) = if stage + buffers <= shared_limit {
            (stage, true)
        } else if buffers <= shared_limit {
            (0, true)
        } else if stage <= shared_limit {
            (stage, false)
        } else {
            (0, false)
        };
        self.program.stage_bytes = u32::try_from(stage).unwrap_or(0);
        self.program.shared_buffers = u32::from(shared);
        self.dynamic_shared_bytes()
    }

    /// Dynamic shared memory the kernel needs for this program.
    pub fn dynamic_shared_bytes(&self) -> usize {
        let buffers = if self.program.shared_buffers != 0 { 2 * self.buffer_bytes() } else { 0 };
        self.program.stage_bytes as usize + buffers
    }

    /// `"unpack → fir → stats+threshold"`, for logs.
    pub fn describe(&self) -> String {
        self.names.join(" → ")
    }
}

/// Decides whether to fuse `chain` under `mode`: `Ok` with the encoded chain,
/// or why it runs as a graph of kernels (under `on`, an error to report).
/// `shared_limit`: the shared memory the fused kernel may add per block
/// (see [`FusedChain::place_in_shared`]); `auto` fuses only chains whose
/// sample buffers fit there.
pub fn plan_fusion(
    chain: &[OpSpec],
    payload_capacity: usize,
    mode: FusedChainMode,
    stage_markers: bool,
    shared_limit: usize,
) -> Result<FusedChain, NotFused> {
    if mode == FusedChainMode::Off {
        return Err(NotFused::Off);
    }
    if stage_markers {
        return Err(NotFused::StageMarkers);
    }
    let fused = FusedChain::encode(chain, payload_capacity)?;
    let buffers = 2 * fused.buffer_bytes();
    if mode == FusedChainMode::Auto && buffers > shared_limit {
        return Err(NotFused::LargeFrames { buffers, shared_limit });
    }
    Ok(fused)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::default_chain;

    fn kinds(c: &FusedChain) -> Vec<(u32, u32, u32)> {
        c.program.steps[..c.program.step_count as usize].iter().map(|s| (s.kind, s.input, s.output)).collect()
    }

    #[test]
    fn default_chain_is_unpack_fir_and_one_reduction_pass() {
        let c = FusedChain::encode(&default_chain(), 8192).unwrap();
        assert_eq!(
            kinds(&c),
            vec![(step::UNPACK_U16, 0, 0), (step::FIR, 0, 1), (step::STATS_THRESHOLD, 1, 0)]
        );
        assert_eq!(c.program.capacity, 4096);
        assert_eq!(c.buffer_bytes(), 16384);
        assert_eq!(c.describe(), "unpack → fir → stats+threshold");
        let OpSpec::Fir { taps } = &default_chain()[1] else {
            panic!("the default chain's second op is a FIR")
        };
        let fir = &c.program.steps[1];
        assert_eq!(fir.count as usize, taps.len());
        assert_eq!(&fir.coeffs[..taps.len()], taps.as_slice());
        assert!(fir.coeffs[taps.len()..].iter().all(|&t| t == 0.0));
        let OpSpec::Threshold { level } = default_chain()[3] else {
            panic!("the default chain ends in threshold")
        };
        assert_eq!(c.program.steps[2].a, level);
    }

    #[test]
    fn filters_ping_pong_and_reductions_read_the_latest_buffer() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U12, scale: 2.0, offset: -1.0 },
            OpSpec::Threshold { level: 0.5 },
            OpSpec::Filter2d { width: 64, kernel: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0] },
            OpSpec::Delay { us: 7 },
            OpSpec::Fir { taps: vec![0.5; 3] },
            OpSpec::Stats,
        ];
        let c = FusedChain::encode(&chain, 3000).unwrap();
        assert_eq!(
            kinds(&c),
            vec![
                (step::UNPACK_U12, 0, 0),
                (step::THRESHOLD, 0, 0),
                (step::FILTER2D, 0, 1),
                (step::DELAY, 0, 0),
                (step::FIR, 1, 0),
                (step::STATS, 0, 0),
            ]
        );
        let s = &c.program.steps;
        assert_eq!((s[0].a, s[0].b), (2.0, -1.0));
        assert_eq!(s[1].a, 0.5);
        assert_eq!((s[2].count, s[2].coeffs[8]), (64, 9.0));
        assert_eq!(s[3].delay_ns, 7000);
        assert_eq!(c.program.capacity, 2000);
        assert_eq!(c.names, vec!["unpack", "threshold", "filter2d", "delay", "fir", "stats"]);
    }

    #[test]
    fn threshold_before_stats_merges_with_its_level() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 },
            OpSpec::Threshold { level: 3.0 },
            OpSpec::Stats,
        ];
        let c = FusedChain::encode(&chain, 100).unwrap();
        assert_eq!(kinds(&c), vec![(step::UNPACK_U8, 0, 0), (step::STATS_THRESHOLD, 0, 0)]);
        assert_eq!(c.program.steps[1].a, 3.0);
    }

    #[test]
    fn shared_memory_takes_what_fits_buffers_first() {
        let mut c = FusedChain::encode(&default_chain(), 8192).unwrap();
        assert_eq!(c.dynamic_shared_bytes(), 0);
        // 8 KiB staged + two 16 KiB buffers.
        assert_eq!(c.place_in_shared(8192, 220 * 1024), 40960);
        assert_eq!((c.program.stage_bytes, c.program.shared_buffers), (8192, 1));
        assert_eq!(c.place_in_shared(8192, 40959), 32768);
        assert_eq!((c.program.stage_bytes, c.program.shared_buffers), (0, 1));
        assert_eq!(c.place_in_shared(8192, 32767), 8192);
        assert_eq!((c.program.stage_bytes, c.program.shared_buffers), (8192, 0));
        assert_eq!(c.place_in_shared(8192, 100), 0);
        assert_eq!((c.program.stage_bytes, c.program.shared_buffers), (0, 0));
        // The stage rounds up to whole 16-byte words; an empty chain stages nothing.
        let mut odd = FusedChain::encode(&default_chain(), 1001).unwrap();
        odd.place_in_shared(1001, 1 << 20);
        assert_eq!(odd.program.stage_bytes, 1008);
        let mut empty = FusedChain::encode(&[], 8192).unwrap();
        empty.place_in_shared(8192, 1 << 20);
        assert_eq!(empty.program.stage_bytes, 0);
    }

    #[test]
    fn fusion_decision_names_each_reason() {
        let chain = default_chain();
        let limit = 220 * 1024;
        assert_eq!(plan_fusion(&chain, 8192, FusedChainMode::Off, false, limit).unwrap_err(), NotFused::Off);
        assert!(plan_fusion(&chain, 8192, FusedChainMode::Auto, false, limit).is_ok());
        // 64 KiB of u16 samples: two buffers of 32,768 floats.
        let err = plan_fusion(&chain, 65536, FusedChainMode::Auto, false, limit).unwrap_err();
        assert_eq!(err, NotFused::LargeFrames { buffers: 262_144, shared_limit: limit });
        assert!(err.to_string().contains("\"on\""), "{err}");
        assert!(plan_fusion(&chain, 65536, FusedChainMode::On, false, limit).is_ok());
        assert_eq!(
            plan_fusion(&chain, 8192, FusedChainMode::Auto, true, limit).unwrap_err(),
            NotFused::StageMarkers
        );
        let mut long = vec![chain[0].clone()];
        long.extend(std::iter::repeat_n(OpSpec::Fir { taps: vec![1.0] }, FUSED_MAX_STEPS));
        assert_eq!(
            plan_fusion(&long, 8192, FusedChainMode::On, false, limit).unwrap_err(),
            NotFused::TooManySteps(FUSED_MAX_STEPS + 1)
        );
        assert_eq!(FusedChain::encode(&[OpSpec::Stats], 64).unwrap_err(), NotFused::NoUnpack);
        let mut full = FusedChain::encode(&long[..FUSED_MAX_STEPS], 8192).unwrap();
        assert_eq!(full.push_fault_at(3), Err(NotFused::TooManySteps(FUSED_MAX_STEPS + 1)));
        let mut faulty = FusedChain::encode(&chain, 8192).unwrap();
        faulty.push_fault_at(3).unwrap();
        let last = &faulty.program.steps[faulty.program.step_count as usize - 1];
        assert_eq!((last.kind, last.count), (step::FAULT_AT, 3));
        assert!(faulty.describe().ends_with("→ fault_at"), "{}", faulty.describe());
        let empty = FusedChain::encode(&[], 8192).unwrap();
        assert_eq!((empty.program.step_count, empty.describe()), (0, String::new()));
    }

    #[test]
    fn a_chain_with_an_fft_takes_the_graph_under_auto_and_is_refused_under_on() {
        let mut chain = default_chain();
        chain.insert(2, OpSpec::Fft(crate::ops::FftSpec::new(256)));
        let limit = 220 * 1024;
        for mode in [FusedChainMode::Auto, FusedChainMode::On] {
            let err = plan_fusion(&chain, 8192, mode, false, limit).unwrap_err();
            assert_eq!(err, NotFused::Fft { index: 2 });
            assert!(err.to_string().contains("chain[2] is an \"fft\" operator"), "{err}");
        }
    }
}
