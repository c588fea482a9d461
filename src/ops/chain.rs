//! A validated linear chain of operators run on the CPU with preallocated
//! buffers, so running it on the hot path never allocates.

use super::{ChainError, OpSpec, cpu, fft::FftPlan, refuse_user_kernels_on_host, validate_chain};
use crate::ring::layout::{RESULT_HAS_DETECT, RESULT_HAS_STATS};

/// What one run of the chain produced (the reduction values and the final samples' count).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ChainOutput {
    pub stats: Option<cpu::Stats>,
    /// `(count, first_index)` of the threshold operator.
    pub detect: Option<(u32, i32)>,
    pub output_len: usize,
}

impl ChainOutput {
    /// `RESULT_*` flags saying which fields are valid.
    pub fn result_flags(&self) -> u32 {
        (if self.stats.is_some() { RESULT_HAS_STATS } else { 0 })
            | (if self.detect.is_some() { RESULT_HAS_DETECT } else { 0 })
    }
}

/// The chain with its two ping-pong sample buffers.
pub struct CpuChain {
    ops: Vec<OpSpec>,
    /// Invariant: both buffers hold at least `max_samples` values.
    a: Vec<f32>,
    b: Vec<f32>,
    max_samples: usize,
    /// The planned transform of each `fft` operator, by chain index.
    ffts: Vec<Option<FftPlan>>,
}

impl CpuChain {
    /// Builds a chain for frames of at most `max_frame_bytes` bytes; a chain
    /// with a user kernel is refused (only the CUDA backend runs those).
    pub fn new(ops: &[OpSpec], max_frame_bytes: usize) -> Result<Self, Vec<ChainError>> {
        validate_chain(ops)?;
        refuse_user_kernels_on_host(ops).map_err(|e| vec![e])?;
        let OpSpec::Unpack { format, .. } = ops[0] else { unreachable!("validated") };
        let max_samples = format.samples_in(max_frame_bytes);
        let ffts =
            ops.iter().map(|op| if let OpSpec::Fft(spec) = op { Some(FftPlan::new(spec)) } else { None });
        Ok(Self {
            ops: ops.to_vec(),
            a: vec![0.0; max_samples],
            b: vec![0.0; max_samples],
            max_samples,
            ffts: ffts.collect(),
        })
    }

    pub fn ops(&self) -> &[OpSpec] {
        &self.ops
    }

    /// Samples after the last operator of the most recent run.
    pub fn output(&self, out: &ChainOutput) -> &[f32] {
        &self.a[..out.output_len]
    }

    /// Runs the chain over one frame's payload.
    pub fn run(&mut self, payload: &[u8]) -> ChainOutput {
        let mut out = ChainOutput::default();
        let mut n = 0;
        for (index, op) in self.ops.iter().enumerate() {
            match op {
                OpSpec::Unpack { format, scale, offset } => {
                    let usable = payload.len().min(self.max_samples_bytes(*format));
                    n = cpu::unpack(&payload[..usable], *format, *scale, *offset, &mut self.a);
                }
                OpSpec::Fir { taps } => {
                    cpu::fir(&self.a[..n], taps, &mut self.b);
                    std::mem::swap(&mut self.a, &mut self.b);
                }
                OpSpec::Filter2d { width, kernel } => {
                    cpu::filter2d(&self.a[..n], *width as usize, kernel, &mut self.b);
                    std::mem::swap(&mut self.a, &mut self.b);
                }
                OpSpec::Stats => out.stats = Some(cpu::stats(&self.a[..n])),
                OpSpec::Threshold { level } => out.detect = Some(cpu::threshold(&self.a[..n], *level)),
                OpSpec::Delay { us } => cpu::delay(*us),
                OpSpec::Fft(_) => {
                    // The spectrum (rows * (n/2+1) <= n samples) fits in `b`.
                    if let Some(plan) = self.ffts.get_mut(index).and_then(Option::as_mut) {
                        n = plan.run(&self.a[..n], &mut self.b);
                        std::mem::swap(&mut self.a, &mut self.b);
                    }
                }
                // Refused by `new`: never in `self.ops`.
                OpSpec::Kernel(_) => {}
            }
        }
        out.output_len = n;
        out
    }

    fn max_samples_bytes(&self, format: super::SampleFormat) -> usize {
        match format {
            super::SampleFormat::U8 => self.max_samples,
            super::SampleFormat::U16 => self.max_samples * 2,
            super::SampleFormat::U12 => self.max_samples / 2 * 3,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{SampleFormat, default_chain};

    #[test]
    fn runs_the_default_chain() {
        let mut chain = CpuChain::new(&default_chain(), 16).unwrap();
        let payload: Vec<u8> = [4096u16, 8192, 0, 40960].iter().flat_map(|v| v.to_le_bytes()).collect();
        let out = chain.run(&payload);
        assert_eq!(out.output_len, 4);
        let x = [1.0f32, 2.0, 0.0, 10.0];
        let mut y = [0f32; 4];
        cpu::fir(&x, &[0.0625, 0.25, 0.375, 0.25, 0.0625], &mut y);
        assert_eq!(chain.output(&out), &y);
        assert_eq!(out.stats.unwrap(), cpu::stats(&y));
        assert_eq!(out.detect.unwrap(), cpu::threshold(&y, 8.0));
        assert_eq!(out.result_flags(), RESULT_HAS_STATS | RESULT_HAS_DETECT);
    }

    #[test]
    fn runs_an_fft_chain_and_reduces_the_spectrum() {
        use crate::ops::{FftOutput, FftSpec, FftWindow};
        let spec = FftSpec { n: 4, window: FftWindow::None, output: FftOutput::Power, scale: Some(1.0) };
        let ops = [
            OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 },
            OpSpec::Fft(spec),
            OpSpec::Stats,
            OpSpec::Threshold { level: 10.0 },
        ];
        let mut chain = CpuChain::new(&ops, 16).unwrap();
        // Rows [1 1 1 1] and [1 0 1 0]; the last 3 bytes make no whole row.
        let out = chain.run(&[1, 1, 1, 1, 1, 0, 1, 0, 7, 7, 7]);
        assert_eq!(out.output_len, 6);
        assert_eq!(chain.output(&out), &[16.0, 0.0, 0.0, 4.0, 0.0, 4.0]);
        assert_eq!(out.stats.unwrap(), cpu::stats(&[16.0, 0.0, 0.0, 4.0, 0.0, 4.0]));
        assert_eq!(out.detect.unwrap(), (1, 0));
    }

    #[test]
    fn refuses_a_chain_with_a_user_kernel() {
        let mut ops = default_chain();
        ops.insert(1, OpSpec::Kernel(toml::from_str("source = 'b.cu'\nentry = 'beamform'").unwrap()));
        let errs = CpuChain::new(&ops, 16).err().expect("a user kernel must be refused");
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0]
                .to_string()
                .starts_with("chain[1] (kernel \"beamform\"): user kernels run only on the CUDA backend")
        );
    }

    #[test]
    fn oversized_payload_is_clamped_not_overrun() {
        let ops = [OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 }, OpSpec::Stats];
        let mut chain = CpuChain::new(&ops, 4).unwrap();
        let out = chain.run(&[1, 1, 1, 1, 1, 1]);
        assert_eq!(out.output_len, 4);
        assert_eq!(out.stats.unwrap().sum, 4.0);
    }
}
