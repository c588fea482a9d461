//! The CUDA backend's actuation outputs: the transmit ring in mapped host
//! memory and the device former's state (`TxState` of
//! handlers/actuation.cuh), which `fl_publish_record` runs after each
//! result. The host only sets the state up; from launch on the former alone
//! writes it, and the host sender reads the ring.

use std::sync::Arc;

use super::GpuError;
use super::mapped::MappedMemory;
use super::runtime::GpuRuntime;
use crate::actuate::ring::{TX_MAX_OUTPUTS, tx_ring_bytes};
use crate::actuate::{ActuateError, ActuationPlan, TxRing, When};
use crate::cuda::memory::DeviceBuffer;

/// `TxOutput` of handlers/actuation.cuh: one output as the former sees it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TxOutput {
    /// `FL_ACT_WHEN_*`.
    pub when: u32,
    /// `PART_*` bits of the message.
    pub parts: u32,
    /// With the samples part: the first this many samples at most.
    pub samples: u32,
    pub _reserved: u32,
}

/// `TxState` of handlers/actuation.cuh (device memory).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TxState {
    /// Device address of the transmit ring (mapped host memory).
    pub ring: u64,
    pub slot_count: u32,
    pub slot_stride: u32,
    pub max_datagram: u32,
    pub outputs: u32,
    /// The producer's copy of the ring's head.
    pub head: u64,
    /// The last `consumed_seq` the former read.
    pub consumed: u64,
    /// Messages formed per output.
    pub message_seq: [u64; TX_MAX_OUTPUTS],
    pub out: [TxOutput; TX_MAX_OUTPUTS],
}

/// `FL_ACT_WHEN_*` of handlers/actuation.cuh.
pub const WHEN_EVERY: u32 = 0;
/// See [`WHEN_EVERY`].
pub const WHEN_DETECTION: u32 = 1;
/// See [`WHEN_EVERY`].
pub const WHEN_FLAG: u32 = 2;

fn when_code(when: When) -> u32 {
    match when {
        When::Every => WHEN_EVERY,
        When::Detection => WHEN_DETECTION,
        When::Flag => WHEN_FLAG,
    }
}

/// The former's state for `plan` over a ring at device address `ring_dptr`.
pub fn tx_state(plan: &ActuationPlan, ring: &TxRing, ring_dptr: u64) -> TxState {
    let mut st = TxState {
        ring: ring_dptr,
        slot_count: ring.slot_count() as u32,
        slot_stride: ring.slot_stride() as u32,
        max_datagram: ring.max_datagram() as u32,
        outputs: plan.outputs.len().min(TX_MAX_OUTPUTS) as u32,
        // The ring starts empty; a relaunch keeps going from where it stands.
        head: ring.head(),
        consumed: ring.consumed(),
        ..TxState::default()
    };
    for (o, out) in plan.outputs.iter().take(TX_MAX_OUTPUTS).enumerate() {
        st.out[o] = TxOutput {
            when: when_code(out.when),
            parts: u32::from(out.shape.parts),
            samples: out.shape.samples,
            _reserved: 0,
        };
    }
    st
}

/// A loop's actuation outputs on the GPU: the transmit ring (mapped host
/// memory the sender reads) and the former's state in device memory.
pub struct DeviceActuation {
    ring: Arc<TxRing>,
    state: DeviceBuffer,
    /// Some output sends samples (the loop must say where the chain's
    /// final samples are).
    wants_samples: bool,
}

impl DeviceActuation {
    /// A transmit ring of `slots` slots for `plan`'s messages in mapped
    /// memory of `rt`, and the former's state over it.
    pub fn new(rt: &GpuRuntime, slots: usize, plan: &ActuationPlan) -> Result<Self, GpuError> {
        let max = plan.max_message_bytes();
        let geometry = |e: ActuateError| GpuError::Setup(e.to_string());
        let needed = tx_ring_bytes(slots, max)
            .ok_or(ActuateError::RingGeometry { slots, max_datagram: max })
            .map_err(geometry)?;
        let mem = MappedMemory::alloc(&rt.ctx, needed)?;
        let ring_dptr = mem.dptr();
        let ring = TxRing::new(Box::new(mem), slots, max).map_err(geometry)?;
        let st = tx_state(plan, &ring, ring_dptr);
        let state = DeviceBuffer::new(&rt.ctx, std::mem::size_of::<TxState>(), 0)?;
        state.write(0, as_bytes(&st))?;
        let wants_samples =
            plan.outputs.iter().any(|o| o.shape.parts & crate::wire::actuation::PART_SAMPLES != 0);
        Ok(Self { ring, state, wants_samples })
    }

    /// The transmit ring, for the sender.
    pub fn ring(&self) -> &Arc<TxRing> {
        &self.ring
    }

    /// Device address of the former's state (`DeviceLoopState::tx`).
    pub fn state_dptr(&self) -> u64 {
        self.state.dptr()
    }

    /// True when some output sends samples (the loop must say where the
    /// chain's final samples are).
    pub fn wants_samples(&self) -> bool {
        self.wants_samples
    }
}

fn as_bytes(st: &TxState) -> &[u8] {
    // SAFETY: TxState is plain old data (integers only, padding zeroed by
    // Default and explicit fields), borrowed for the slice's lifetime.
    unsafe { std::slice::from_raw_parts((st as *const TxState).cast::<u8>(), std::mem::size_of::<TxState>()) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actuate::{Destination, OutputPlan};
    use crate::wire::actuation::{MessageShape, PART_RECORD, PART_SAMPLES};

    #[test]
    fn the_state_carries_each_output_in_config_order() {
        let plan = ActuationPlan {
            outputs: vec![
                OutputPlan {
                    name: "a".into(),
                    destination: Destination::Reply,
                    shape: MessageShape { parts: PART_RECORD, samples: 0 },
                    when: When::Detection,
                    max_rate: 10,
                },
                OutputPlan {
                    name: "b".into(),
                    destination: Destination::Reply,
                    shape: MessageShape { parts: PART_SAMPLES, samples: 7 },
                    when: When::Flag,
                    max_rate: 10,
                },
            ],
        };
        let ring = TxRing::host(16, plan.max_message_bytes()).unwrap();
        let st = tx_state(&plan, &ring, 0x1000);
        assert_eq!((st.ring, st.slot_count, st.outputs), (0x1000, 16, 2));
        assert_eq!(st.max_datagram as usize, plan.max_message_bytes());
        assert_eq!(
            (st.out[0].when, st.out[0].parts, st.out[0].samples),
            (WHEN_DETECTION, PART_RECORD as u32, 0)
        );
        assert_eq!((st.out[1].when, st.out[1].parts, st.out[1].samples), (WHEN_FLAG, PART_SAMPLES as u32, 7));
        assert_eq!(st.out[2].parts, 0);
    }
}
