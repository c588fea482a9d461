//! Chain operators: the built-in ones' configuration, their CPU reference
//! implementations and the linear chain that runs them on the host, and
//! user CUDA kernels ([`user_kernel`]), which only the CUDA backend runs.
//!
//! Every built-in operator has exactly one meaning, defined by its CPU
//! implementation in [`cpu`]; the CUDA kernels in `kernels/` are checked against it.

pub mod chain;
pub mod cpu;
pub mod fft;
pub mod handler;
pub mod user_kernel;

pub use chain::{ChainOutput, CpuChain};
pub use fft::{FftOutput, FftSpec, FftWindow};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// Longest FIR filter the kernels support.
pub const MAX_FIR_TAPS: usize = 63;

/// Sample encoding of the raw frame payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SampleFormat {
    /// One unsigned byte per sample.
    U8,
    /// Unsigned 16-bit little-endian.
    U16,
    /// Unsigned 12-bit, two samples packed in three bytes:
    /// `s0 = b0 | (b1 & 0xf) << 8`, `s1 = b1 >> 4 | b2 << 4`.
    U12,
}

impl SampleFormat {
    /// Number of whole samples in `bytes` payload bytes.
    pub fn samples_in(self, bytes: usize) -> usize {
        match self {
            SampleFormat::U8 => bytes,
            SampleFormat::U16 => bytes / 2,
            SampleFormat::U12 => bytes / 3 * 2,
        }
    }
}

fn one() -> f32 {
    1.0
}

/// One operator of the chain, as written in the config (`[[chain]]` tables).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum OpSpec {
    /// Raw samples to f32: `y = sample * scale + offset`. Must come first.
    Unpack {
        format: SampleFormat,
        #[serde(default = "one")]
        scale: f32,
        #[serde(default)]
        offset: f32,
    },
    /// 1-D FIR, centred: `y[i] = sum_k taps[k] * x[i + k - K/2]`, zero outside.
    Fir { taps: Vec<f32> },
    /// 3x3 2-D filter over rows of `width` samples, zero border; the samples
    /// after the last whole row pass through unchanged.
    Filter2d { width: u32, kernel: [f32; 9] },
    /// Sum, min, max and mean of the samples (f64 accumulation on the CPU);
    /// samples pass through.
    Stats,
    /// Counts samples strictly above `level` and finds the first; samples pass through.
    Threshold { level: f32 },
    /// Holds the chain for `us` microseconds and passes the samples through:
    /// a stand-in for heavy processing, to test what happens when the
    /// consumer is slower than the sensor.
    Delay { us: u32 },
    /// Batched real-to-complex FFT over rows of `n` samples, windowed; the
    /// samples become `n/2 + 1` magnitude or power bins per row (see [`fft`]).
    Fft(FftSpec),
    /// A user CUDA kernel from a `.cu` file (CUDA backend only).
    Kernel(user_kernel::UserKernelSpec),
}

/// Longest artificial delay a `delay` operator may ask for (µs).
pub const MAX_DELAY_US: u32 = 1_000_000;

impl OpSpec {
    /// Stable short name, used in logs, errors and GPU stage names.
    pub fn name(&self) -> &'static str {
        match self {
            OpSpec::Unpack { .. } => "unpack",
            OpSpec::Fir { .. } => "fir",
            OpSpec::Filter2d { .. } => "filter2d",
            OpSpec::Stats => "stats",
            OpSpec::Threshold { .. } => "threshold",
            OpSpec::Delay { .. } => "delay",
            OpSpec::Fft(_) => "fft",
            OpSpec::Kernel(_) => "kernel",
        }
    }
}

/// A chain that cannot run, naming the operator (by `chain[i]`) and the fix.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum ChainError {
    /// The chain has no operator; add a `[[chain]]` table with `op = "unpack"` first.
    #[error("chain is empty: add a [[chain]] table with op = \"unpack\" first")]
    Empty,
    /// The chain does not start with `unpack`; make `chain[0]` an `op = "unpack"` table.
    #[error("chain[0] is \"{0}\" but the chain must start with op = \"unpack\"")]
    MissingUnpack(&'static str),
    /// An `unpack` after the first entry; remove it or move it to `chain[0]`.
    #[error("chain[{0}]: unpack may only appear first; remove it or move it to chain[0]")]
    UnpackNotFirst(usize),
    /// A FIR filter's tap count is even or out of range; give an odd number of taps up to the
    /// maximum.
    #[error("chain[{index}].taps: {len} taps; use an odd number between 1 and {MAX_FIR_TAPS}")]
    BadTaps { index: usize, len: usize },
    /// An operator's number is NaN or infinite; give a finite value.
    #[error("chain[{index}].{key}: value must be finite (got {value}); give a finite number")]
    NotFinite { index: usize, key: &'static str, value: f32 },
    /// A width of 0; give a width of at least 1.
    #[error("chain[{index}].width: must be at least 1 (got 0)")]
    ZeroWidth { index: usize },
    /// A delay longer than a delay may last; lower `us`.
    #[error("chain[{index}].us: {us} is over the {MAX_DELAY_US} µs a delay may last; lower it")]
    LongDelay { index: usize, us: u32 },
    /// An operator that may appear once per chain appears twice; remove the extra entry.
    #[error("chain[{index}]: only one \"{op}\" operator is allowed per chain; remove the extra entry")]
    Duplicate { index: usize, op: &'static str },
    /// An FFT row length out of range; give `n` within the supported range.
    #[error(
        "chain[{index}].n: {n} samples per row; use a row length between {} and {}",
        fft::MIN_FFT_LEN,
        fft::MAX_FFT_LEN
    )]
    FftLength { index: usize, n: u32 },
    /// An FFT scale of 0 or below; give a positive scale, or leave it out for 1/n.
    #[error("chain[{index}].scale: must be above 0 (got {value}); leave it out for 1/n")]
    FftScale { index: usize, value: f32 },
    /// A user kernel's key is wrong (the message names the key and the fix).
    #[error("chain[{index}].{key}: {message}")]
    UserKernel { index: usize, key: String, message: String },
    /// A user kernel on the host backend; use `backend = "cuda"` on a machine with a GPU.
    #[error(
        "chain[{index}] (kernel \"{entry}\"): user kernels run only on the CUDA backend; use backend = \"cuda\" on a machine with a GPU"
    )]
    UserKernelOnHost { index: usize, entry: String },
    /// The backend cannot run the chain as configured (the message says why and what to change).
    #[error("[[chain]]: {0}")]
    Backend(String),
}

/// The host backend's refusal of a chain with a user kernel, naming the first one.
pub fn refuse_user_kernels_on_host(chain: &[OpSpec]) -> Result<(), ChainError> {
    match chain.iter().enumerate().find_map(|(i, op)| match op {
        OpSpec::Kernel(k) => Some((i, k)),
        _ => None,
    }) {
        Some((index, k)) => Err(ChainError::UserKernelOnHost { index, entry: k.entry.clone() }),
        None => Ok(()),
    }
}

/// Checks that a chain is one the CPU and GPU backends can both run.
pub fn validate_chain(chain: &[OpSpec]) -> Result<(), Vec<ChainError>> {
    let mut errs = Vec::new();
    match chain.first() {
        None => return Err(vec![ChainError::Empty]),
        Some(OpSpec::Unpack { .. }) => {}
        Some(other) => errs.push(ChainError::MissingUnpack(other.name())),
    }
    let (mut stats, mut threshold) = (false, false);
    for (index, op) in chain.iter().enumerate() {
        match op {
            OpSpec::Unpack { scale, offset, .. } => {
                if index != 0 {
                    errs.push(ChainError::UnpackNotFirst(index));
                }
                for (key, value) in [("scale", *scale), ("offset", *offset)] {
                    if !value.is_finite() {
                        errs.push(ChainError::NotFinite { index, key, value });
                    }
                }
            }
            OpSpec::Fir { taps } => {
                if taps.is_empty() || taps.len() % 2 == 0 || taps.len() > MAX_FIR_TAPS {
                    errs.push(ChainError::BadTaps { index, len: taps.len() });
                }
                if let Some(v) = taps.iter().find(|t| !t.is_finite()) {
                    errs.push(ChainError::NotFinite { index, key: "taps", value: *v });
                }
            }
            OpSpec::Filter2d { width, kernel } => {
                if *width == 0 {
                    errs.push(ChainError::ZeroWidth { index });
                }
                if let Some(v) = kernel.iter().find(|t| !t.is_finite()) {
                    errs.push(ChainError::NotFinite { index, key: "kernel", value: *v });
                }
            }
            OpSpec::Stats => {
                if std::mem::replace(&mut stats, true) {
                    errs.push(ChainError::Duplicate { index, op: "stats" });
                }
            }
            OpSpec::Delay { us } => {
                if *us > MAX_DELAY_US {
                    errs.push(ChainError::LongDelay { index, us: *us });
                }
            }
            OpSpec::Fft(spec) => errs.extend(spec.problems(index)),
            OpSpec::Threshold { level } => {
                if std::mem::replace(&mut threshold, true) {
                    errs.push(ChainError::Duplicate { index, op: "threshold" });
                }
                if !level.is_finite() {
                    errs.push(ChainError::NotFinite { index, key: "level", value: *level });
                }
            }
            OpSpec::Kernel(spec) => {
                errs.extend(spec.problems().into_iter().map(|p| ChainError::UserKernel {
                    index,
                    key: p.key,
                    message: p.message,
                }))
            }
        }
    }
    if errs.is_empty() { Ok(()) } else { Err(errs) }
}

/// The default chain: unpack u16, a 5-tap smoothing FIR, stats, threshold.
pub fn default_chain() -> Vec<OpSpec> {
    vec![
        OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0 / 4096.0, offset: 0.0 },
        OpSpec::Fir { taps: vec![0.0625, 0.25, 0.375, 0.25, 0.0625] },
        OpSpec::Stats,
        OpSpec::Threshold { level: 8.0 },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_chain_is_valid() {
        validate_chain(&default_chain()).unwrap();
    }

    #[test]
    fn reports_every_problem() {
        let chain = vec![
            OpSpec::Stats,
            OpSpec::Fir { taps: vec![1.0, 2.0] },
            OpSpec::Unpack { format: SampleFormat::U8, scale: f32::NAN, offset: 0.0 },
            OpSpec::Stats,
        ];
        let errs = validate_chain(&chain).unwrap_err();
        assert_eq!(errs.len(), 5, "{errs:?}");
        assert!(errs.iter().any(|e| e.to_string().contains("chain[1].taps")));
    }

    #[test]
    fn fft_parses_with_defaults_and_must_follow_unpack() {
        #[derive(Deserialize)]
        struct Chain {
            chain: Vec<OpSpec>,
        }
        let text = "[[chain]]\nop = \"unpack\"\nformat = \"u16\"\n[[chain]]\nop = \"fft\"\nn = 1024\n\
                    [[chain]]\nop = \"fft\"\nn = 6\nwindow = \"blackman\"\noutput = \"power\"\nscale = 2.0\n";
        let chain = toml::from_str::<Chain>(text).unwrap().chain;
        let defaults =
            FftSpec { n: 1024, window: FftWindow::Hann, output: FftOutput::Magnitude, scale: None };
        assert_eq!(chain[1], OpSpec::Fft(defaults));
        let given = FftSpec { n: 6, window: FftWindow::Blackman, output: FftOutput::Power, scale: Some(2.0) };
        assert_eq!(chain[2], OpSpec::Fft(given));
        validate_chain(&chain).unwrap();
        let typo = "[[chain]]\nop = \"fft\"\nn = 8\nwindw = \"hann\"\n";
        assert!(toml::from_str::<Chain>(typo).is_err());

        let errs = validate_chain(&[chain[1].clone()]).unwrap_err();
        assert_eq!(errs, vec![ChainError::MissingUnpack("fft")]);
        let short =
            OpSpec::Fft(FftSpec { n: 1, window: FftWindow::None, output: FftOutput::Power, scale: None });
        let errs = validate_chain(&[chain[0].clone(), short]).unwrap_err();
        assert_eq!(
            errs[0].to_string(),
            "chain[1].n: 1 samples per row; use a row length between 2 and 65536"
        );
    }

    fn kernel(params: &str) -> OpSpec {
        OpSpec::Kernel(
            toml::from_str(&format!(
                "source = 'g.cu'\nentry = 'gain'\nparam_types = ['gain: f32']\n{params}"
            ))
            .unwrap(),
        )
    }

    #[test]
    fn user_kernel_problems_name_their_chain_index() {
        let mut chain = default_chain();
        chain.insert(2, kernel("params = { gain = 2.5 }"));
        validate_chain(&chain).unwrap();
        chain[2] = kernel("params = { gain = 2.5, channels = 4 }");
        let errs = validate_chain(&chain).unwrap_err();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].to_string().starts_with("chain[2].params.channels: not declared"), "{}", errs[0]);
    }

    #[test]
    fn host_refuses_the_first_user_kernel() {
        let mut chain = default_chain();
        refuse_user_kernels_on_host(&chain).unwrap();
        chain.insert(1, kernel("params = { gain = 1 }"));
        chain.push(kernel("params = { gain = 1 }"));
        let err = refuse_user_kernels_on_host(&chain).unwrap_err();
        assert_eq!(
            err.to_string(),
            "chain[1] (kernel \"gain\"): user kernels run only on the CUDA backend; use backend = \"cuda\" on a machine with a GPU"
        );
    }

    #[test]
    fn kernel_entries_parse_from_chain_tables() {
        let op: OpSpec = toml::from_str(
            "op = 'kernel'\nsource = 'b.cu'\nentry = 'beamform'\nparams = { gain = 2.5, channels = 64 }\n\
             param_types = ['gain: f32', 'channels: u32']\noutput = { samples = 128 }\nthreads = 128",
        )
        .unwrap();
        let OpSpec::Kernel(k) = &op else { panic!("{op:?}") };
        assert_eq!((k.entry.as_str(), k.output_samples(9), k.launch(128).blocks), ("beamform", 128, 1));
        assert_eq!(op.name(), "kernel");
        assert!(toml::from_str::<OpSpec>("op = 'kernel'\nsource = 'b.cu'\nentry = 'k'\nblock = 3").is_err());
    }
}
