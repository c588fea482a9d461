//! Live parameters: the tunable values of the chain's built-in operators in
//! two banks of device memory that the kernels read on every frame. The host
//! rewrites the bank no frame uses, then publishes it with its generation in
//! [`ParamControl::select`]; the data-ready handler takes the selection when
//! it claims a frame (every frame runs entirely with one bank, and its result
//! records that bank's generation) and acknowledges it in
//! [`ParamControl::ack`]. A bank is rewritten only once the handler
//! acknowledged the other one: it takes a selection only between two frames,
//! so no frame can still be reading the bank being rewritten.
//!
//! A bank holds the chain's values as [`FusedStep`]s: the fused and tiled
//! kernels read their program's steps from it ([`ParamLayout::Steps`]), the
//! one-kernel-per-operator graph reads one step per operator of the chain,
//! at the operator's index ([`ParamLayout::PerOperator`]). A user kernel's
//! parameter struct of at most [`BANKED_PARAM_BYTES`] bytes lies in its
//! step's coefficient words, where its entry kernel (or its prologue) takes
//! it from on every frame.

use super::GpuError;
use super::control::ParamControl;
use super::driver::DeviceBuffer;
use super::fused::{FUSED_COEFFS, FusedChain, FusedStep};
use super::mapped::MappedMemory;
use crate::ops::user_kernel::UserKernelSpec;
use crate::ops::{MAX_FIR_TAPS, OpSpec};
use cudarc::driver::CudaContext;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A graph kernel's `param_step` when its arguments are its only values (`FL_NO_PARAM_STEP`).
pub const NO_PARAM_STEP: u32 = u32::MAX;

/// The largest user-kernel parameter struct the banks carry: a step's
/// coefficient words. A larger one changes by a rebuild.
pub const BANKED_PARAM_BYTES: usize = FUSED_COEFFS * std::mem::size_of::<f32>();

/// The parameter struct of user kernel `spec` as its bank step carries it:
/// `None` when it has no parameters, more than [`BANKED_PARAM_BYTES`], or
/// values that do not encode (refused earlier, with their keys).
pub fn banked_user_params(spec: &UserKernelSpec) -> Option<Vec<u8>> {
    spec.param_block().ok().filter(|b| !b.is_empty() && b.len() <= BANKED_PARAM_BYTES)
}

/// Whether user kernels `a` and `b` differ in parameter values only, and
/// those go through the banks.
fn user_values_only(a: &UserKernelSpec, b: &UserKernelSpec) -> bool {
    let without_values = |k: &UserKernelSpec| UserKernelSpec { params: Default::default(), ..k.clone() };
    a == b || (without_values(a) == without_values(b) && banked_user_params(b).is_some())
}

/// How the kernels of a chain find their values in a bank.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParamLayout {
    /// The fused program's steps (the fused and the tiled fused kernel).
    Steps,
    /// One step per operator of the chain, at its index (the graph's kernels).
    PerOperator,
}

/// `ParamControl::select` of `generation` in `bank` (0 or 1).
pub fn select_word(generation: u32, bank: u32) -> u64 {
    (u64::from(bank & 1) << 32) | u64::from(generation)
}

/// The bank a `select` value names.
pub fn bank_of(select: u64) -> u32 {
    ((select >> 32) & 1) as u32
}

/// The generation a `select` value names.
pub fn generation_of(select: u64) -> u32 {
    select as u32
}

/// The bank the next parameter set goes to, given what the host published
/// last (`select`) and what the handler acknowledged (`ack`): the other
/// bank, once the handler took the published one; `None` while it has not
/// (a frame may then still run with the other bank).
pub fn writable_bank(select: u64, ack: u64) -> Option<u32> {
    (select == ack).then(|| 1 - bank_of(select))
}

/// Whether the change from `running` to `next` touches only values the
/// banks carry (unpack scale and offset, FIR taps of the same count,
/// threshold level, filter2d kernel of the same width, delay, a user
/// kernel's parameter values when its struct fits a step), so that the
/// running graph can take it without a rebuild. Anything else (another
/// operator, tap count, format, width, an fft, a user kernel's source,
/// entry, shape or parameter types) needs the rebuild.
pub fn bank_carries(running: &[OpSpec], next: &[OpSpec]) -> bool {
    running.len() == next.len()
        && running.iter().zip(next).all(|(a, b)| match (a, b) {
            (OpSpec::Unpack { format: f, .. }, OpSpec::Unpack { format: g, .. }) => f == g,
            (OpSpec::Fir { taps: t }, OpSpec::Fir { taps: u }) => t.len() == u.len(),
            (OpSpec::Filter2d { width: w, .. }, OpSpec::Filter2d { width: v, .. }) => w == v,
            (OpSpec::Threshold { .. }, OpSpec::Threshold { .. })
            | (OpSpec::Delay { .. }, OpSpec::Delay { .. }) => true,
            (OpSpec::Kernel(k), OpSpec::Kernel(l)) => user_values_only(k, l),
            _ => a == b,
        })
}

/// One [`FusedStep`] per operator of `chain` holding its tunable values, as
/// the graph's kernels read them (`fl_live_step`): `a`/`b` the unpack scale
/// and offset or the threshold level, `coeffs` the FIR taps or the 3x3
/// kernel, `delay_ns` the delay; a user kernel's parameter struct its
/// `coeffs` bytes ([`banked_user_params`]). Other operators get an empty step.
pub fn per_operator_image(chain: &[OpSpec]) -> Vec<FusedStep> {
    chain
        .iter()
        .map(|op| {
            let mut s = FusedStep::empty();
            match op {
                OpSpec::Unpack { scale, offset, .. } => (s.a, s.b) = (*scale, *offset),
                OpSpec::Fir { taps } => {
                    let n = taps.len().min(MAX_FIR_TAPS).min(FUSED_COEFFS);
                    s.coeffs[..n].copy_from_slice(&taps[..n]);
                    s.count = n as u32;
                }
                OpSpec::Filter2d { width, kernel } => {
                    s.coeffs[..9].copy_from_slice(kernel);
                    s.count = *width;
                }
                OpSpec::Threshold { level } => s.a = *level,
                OpSpec::Delay { us } => s.delay_ns = u64::from(*us) * 1000,
                OpSpec::Kernel(k) => {
                    if let Some(bytes) = banked_user_params(k) {
                        // Word by word, bit for bit: the kernel reads the struct's bytes.
                        for (word, chunk) in s.coeffs.iter_mut().zip(bytes.chunks(4)) {
                            let mut b = [0u8; 4];
                            b[..chunk.len()].copy_from_slice(chunk);
                            *word = f32::from_bits(u32::from_ne_bytes(b));
                        }
                        s.count = bytes.len() as u32;
                    }
                }
                _ => {}
            }
            s
        })
        .collect()
}

/// The bank image of `chain` under `layout`: the steps of `fused` (the
/// program the handler runs) if given, else of the chain encoded for slots
/// of `capacity` bytes (the tiled kernel's), or one step per operator.
pub fn image(
    layout: ParamLayout,
    chain: &[OpSpec],
    fused: Option<&FusedChain>,
    capacity: usize,
) -> Result<Vec<FusedStep>, GpuError> {
    match (layout, fused) {
        (ParamLayout::PerOperator, _) => Ok(per_operator_image(chain)),
        (ParamLayout::Steps, Some(f)) => Ok(f.program.steps[..f.program.step_count as usize].to_vec()),
        (ParamLayout::Steps, None) => {
            let f = FusedChain::encode(chain, capacity).map_err(|e| GpuError::Setup(e.to_string()))?;
            Ok(f.program.steps[..f.program.step_count as usize].to_vec())
        }
    }
}

/// The bytes of `steps` as the device reads them.
fn image_bytes(steps: &[FusedStep]) -> &[u8] {
    // SAFETY: FusedStep is #[repr(C)] plain old data (integers and floats;
    // 288 bytes, no padding: the layout test checks it against ring.cuh).
    unsafe { std::slice::from_raw_parts(steps.as_ptr().cast::<u8>(), std::mem::size_of_val(steps)) }
}

/// What one bank switch did.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BankSwitch {
    pub generation: u32,
    pub bank: u32,
    /// Waiting for the handler to acknowledge the previous switch.
    pub waited: Duration,
    /// From the call to the publication of the new selection.
    pub total: Duration,
}

/// The two banks of one chain shape, and the control block the handler reads.
pub struct ParamBanks {
    /// Both banks, `bank_bytes` each.
    banks: DeviceBuffer,
    /// Page-locked copy source: a copy from it is complete when
    /// `cuMemcpyHtoD` returns (from pageable memory it may not be yet).
    staging: MappedMemory,
    bank_bytes: usize,
}

impl ParamBanks {
    /// Banks for images of `steps` steps (at least one), both zeroed.
    pub fn new(ctx: &Arc<CudaContext>, steps: usize) -> Result<Self, GpuError> {
        let bank_bytes = steps.max(1) * std::mem::size_of::<FusedStep>();
        Ok(Self {
            banks: DeviceBuffer::new(ctx, 2 * bank_bytes, 0)?,
            staging: MappedMemory::alloc(ctx, bank_bytes)?,
            bank_bytes,
        })
    }

    /// Device address of bank 0.
    pub fn dptr(&self) -> u64 {
        self.banks.dptr()
    }

    pub fn bank_bytes(&self) -> usize {
        self.bank_bytes
    }

    /// Whether `steps` fills these banks exactly (the same chain shape).
    pub fn fits(&self, steps: &[FusedStep]) -> bool {
        std::mem::size_of_val(steps) == self.bank_bytes
    }

    /// Writes `steps` into `bank`; complete on return. Only for a bank no
    /// frame reads (see [`writable_bank`]).
    pub fn write(&self, bank: u32, steps: &[FusedStep]) -> Result<(), GpuError> {
        let bytes = image_bytes(steps);
        if bytes.len() > self.bank_bytes {
            return Err(GpuError::Setup(format!(
                "a parameter image of {} B for banks of {} B",
                bytes.len(),
                self.bank_bytes
            )));
        }
        // SAFETY: the staging mapping holds at least bank_bytes >= bytes.len()
        // bytes and only this method (under the executor's lock) writes it.
        let staging = unsafe { std::slice::from_raw_parts_mut(self.staging.host_ptr(), bytes.len()) };
        staging.copy_from_slice(bytes);
        Ok(self.banks.write(bank as usize * self.bank_bytes, staging)?)
    }
}

/// The [`ParamControl`] in mapped memory, owned by the executor for the
/// loop's lifetime.
pub struct ParamSelect {
    memory: MappedMemory,
}

impl ParamSelect {
    pub fn new(ctx: &Arc<CudaContext>) -> Result<Self, GpuError> {
        Ok(Self { memory: MappedMemory::alloc(ctx, std::mem::size_of::<ParamControl>())? })
    }

    /// Device address, for `LoopParams::param_ctl`.
    pub fn dptr(&self) -> u64 {
        self.memory.dptr()
    }

    fn control(&self) -> &ParamControl {
        // SAFETY: the mapping holds a zero-initialised ParamControl (all-zero
        // atomics are valid), 64-byte aligned (page aligned), alive as long as `self`.
        unsafe { &*(self.memory.host_ptr() as *const ParamControl) }
    }

    pub fn select(&self) -> u64 {
        self.control().select.load()
    }

    pub fn ack(&self) -> u64 {
        self.control().ack.load()
    }

    /// Sets both words while no frame runs (before a launch or a relaunch).
    pub fn reset(&self, select: u64) {
        let c = self.control();
        c.select.store(select);
        c.ack.store(select);
    }

    /// Publishes `select` (release: the bank written before it is complete).
    pub fn publish(&self, select: u64) {
        self.control().select.store(select);
    }

    /// Waits until the handler acknowledged the published selection, for at
    /// most `limit`; returns the bank to write next, or `None` on time-out.
    pub fn wait_writable(&self, limit: Duration) -> Option<u32> {
        let start = Instant::now();
        loop {
            if let Some(bank) = writable_bank(self.select(), self.ack()) {
                return Some(bank);
            }
            if start.elapsed() >= limit {
                return None;
            }
            std::thread::sleep(Duration::from_micros(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::{SampleFormat, default_chain};

    #[test]
    fn select_words_carry_bank_and_generation() {
        for (g, b) in [(0, 0), (1, 1), (7, 0), (u32::MAX, 1)] {
            let w = select_word(g, b);
            assert_eq!((generation_of(w), bank_of(w)), (g, b));
        }
        assert_ne!(select_word(5, 0), select_word(5, 1));
    }

    #[test]
    fn the_other_bank_is_writable_only_once_the_handler_took_the_published_one() {
        let published = select_word(3, 1);
        assert_eq!(writable_bank(published, published), Some(0));
        // The handler still runs generation 2 in bank 0: neither may be written.
        assert_eq!(writable_bank(published, select_word(2, 0)), None);
        let next = select_word(4, 0);
        assert_eq!(writable_bank(next, next), Some(1));
        // Alternating banks across a sequence of switches.
        let mut sel = select_word(1, 0);
        for g in 2..10 {
            let bank = writable_bank(sel, sel).expect("acknowledged");
            assert_ne!(bank, bank_of(sel));
            sel = select_word(g, bank);
            assert_eq!(writable_bank(sel, select_word(g - 1, 1 - bank)), None);
        }
    }

    #[test]
    fn banks_carry_values_but_not_shapes() {
        let running = default_chain();
        let mut values = running.clone();
        for op in &mut values {
            match op {
                OpSpec::Unpack { scale, offset, .. } => (*scale, *offset) = (2.0, -1.0),
                OpSpec::Fir { taps } => taps.iter_mut().for_each(|t| *t *= 0.5),
                OpSpec::Threshold { level } => *level += 1.0,
                _ => {}
            }
        }
        assert!(bank_carries(&running, &values));
        assert!(bank_carries(&running, &running));
        let mut taps = running.clone();
        taps[1] = OpSpec::Fir { taps: vec![1.0; 3] };
        assert!(!bank_carries(&running, &taps), "a tap count is a shape");
        let u16 = [OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 }];
        assert!(!bank_carries(&u16, &[OpSpec::Unpack { format: SampleFormat::U8, scale: 1.0, offset: 0.0 }]));
        assert!(bank_carries(&u16, &[OpSpec::Unpack { format: SampleFormat::U16, scale: 4.0, offset: 2.0 }]));
        let mut longer = running.clone();
        longer.push(OpSpec::Delay { us: 1 });
        assert!(!bank_carries(&running, &longer));
        let f = vec![OpSpec::Filter2d { width: 8, kernel: [0.0; 9] }];
        assert!(bank_carries(&f, &[OpSpec::Filter2d { width: 8, kernel: [1.0; 9] }]));
        assert!(!bank_carries(&f, &[OpSpec::Filter2d { width: 9, kernel: [0.0; 9] }]));
        assert!(bank_carries(&[OpSpec::Delay { us: 1 }], &[OpSpec::Delay { us: 9 }]));
    }

    #[test]
    fn per_operator_images_put_each_value_at_its_operators_index() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 0.5, offset: -2.0 },
            OpSpec::Fir { taps: vec![0.25, 0.5, 0.25] },
            OpSpec::Stats,
            OpSpec::Threshold { level: 3.5 },
            OpSpec::Filter2d { width: 4, kernel: [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0] },
            OpSpec::Delay { us: 7 },
        ];
        let img = per_operator_image(&chain);
        assert_eq!(img.len(), chain.len());
        assert_eq!((img[0].a, img[0].b), (0.5, -2.0));
        assert_eq!(&img[1].coeffs[..4], &[0.25, 0.5, 0.25, 0.0]);
        assert_eq!(img[2], FusedStep::empty());
        assert_eq!(img[3].a, 3.5);
        assert_eq!(img[4].coeffs[8], 9.0);
        assert_eq!(img[5].delay_ns, 7000);
    }

    #[test]
    fn step_images_follow_the_fused_encoding_and_differ_only_in_values() {
        let running = default_chain();
        let mut next = running.clone();
        next[0] = match &next[0] {
            OpSpec::Unpack { format, .. } => OpSpec::Unpack { format: *format, scale: 3.0, offset: 1.0 },
            other => other.clone(),
        };
        let a = image(ParamLayout::Steps, &running, None, 8192).unwrap();
        let b = image(ParamLayout::Steps, &next, None, 8192).unwrap();
        assert_eq!(a.len(), b.len());
        assert_eq!((b[0].a, b[0].b), (3.0, 1.0));
        for (x, y) in a.iter().zip(&b) {
            assert_eq!((x.kind, x.input, x.output, x.count), (y.kind, y.input, y.output, y.count));
        }
        assert_ne!(a, b);
    }

    fn gain_kernel(gain: f64, limit: i64) -> UserKernelSpec {
        use crate::ops::user_kernel::ParamValue;
        UserKernelSpec {
            source: "gain_offset.cu".into(),
            code: None,
            entry: "gain_offset".into(),
            params: [
                ("gain".to_owned(), ParamValue::Float(gain)),
                ("limit".to_owned(), ParamValue::Int(limit)),
            ]
            .into_iter()
            .collect(),
            param_types: vec!["gain: f32".into(), "limit: u32".into()],
            output: Default::default(),
            threads: None,
            blocks: None,
            shared_bytes: 0,
        }
    }

    #[test]
    fn user_kernel_parameter_structs_ride_in_their_step_bit_for_bit() {
        let chain = vec![
            OpSpec::Unpack { format: SampleFormat::U16, scale: 1.0, offset: 0.0 },
            OpSpec::Kernel(gain_kernel(-2.5, 4000)),
            OpSpec::Stats,
        ];
        let img = per_operator_image(&chain);
        let words: Vec<u32> = img[1].coeffs.iter().map(|c| c.to_bits()).collect();
        assert_eq!(&words[..3], &[(-2.5f32).to_bits(), 4000, 0]);
        assert_eq!(img[1].count, 8, "the struct's bytes");
        assert_eq!(img[1].kind, 0, "not a fused step");
        // Values move through the banks; a source, entry, type list or
        // shape change does not.
        let k = |spec: UserKernelSpec| vec![OpSpec::Kernel(spec)];
        let base = gain_kernel(1.0, 10);
        assert!(bank_carries(&k(base.clone()), &k(gain_kernel(4.0, 99))));
        assert!(!bank_carries(
            &k(base.clone()),
            &k(UserKernelSpec { threads: Some(64), ..gain_kernel(4.0, 99) })
        ));
        assert!(!bank_carries(
            &k(base.clone()),
            &k(UserKernelSpec { entry: "other".into(), ..base.clone() })
        ));
        assert!(!bank_carries(
            &k(base.clone()),
            &k(UserKernelSpec { source: "b.cu".into(), ..base.clone() })
        ));
        let retyped =
            UserKernelSpec { param_types: vec!["gain: f64".into(), "limit: u32".into()], ..base.clone() };
        assert!(!bank_carries(&k(base.clone()), &k(retyped)));
        // A struct over a step's words stays out of the banks.
        let wide = |v: f64| {
            use crate::ops::user_kernel::ParamValue;
            let n = BANKED_PARAM_BYTES / 8 + 1;
            UserKernelSpec {
                params: (0..n).map(|i| (format!("p{i}"), ParamValue::Float(v))).collect(),
                param_types: (0..n).map(|i| format!("p{i}: f64")).collect(),
                ..base.clone()
            }
        };
        assert!(banked_user_params(&wide(1.0)).is_none());
        assert!(!bank_carries(&k(wide(1.0)), &k(wide(2.0))));
        assert_eq!(per_operator_image(&k(wide(1.0)))[0], FusedStep::empty());
        // No parameters: nothing to carry, and nothing changes.
        let bare = UserKernelSpec { params: Default::default(), param_types: vec![], ..base };
        assert!(banked_user_params(&bare).is_none() && bank_carries(&k(bare.clone()), &k(bare)));
    }
}
