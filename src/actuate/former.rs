//! The host backend's message former: after each frame's result, the twin of
//! the CUDA former's last step. Which outputs fire for a frame, the flags its
//! messages carry, and the forming of each into the transmit ring.

use super::config::{ActuationPlan, When};
use super::ring::TxWriter;
use crate::ring::ResultRecord;
use crate::ring::layout::{RESULT_HAS_DETECT, SLOT_INCOMPLETE, USER_RESULT_WORDS};
use crate::wire::actuation::{FLAG_DETECTED, FLAG_INCOMPLETE, FLAG_USER_REQUEST, MessageInput};

/// True when an output sending `when` sends a message for the frame of `record`.
pub fn fires(when: When, record: &ResultRecord) -> bool {
    match when {
        When::Every => true,
        When::Detection => detected(record),
        When::Flag => record.actuate_request != 0,
    }
}

fn detected(record: &ResultRecord) -> bool {
    record.result_flags & RESULT_HAS_DETECT != 0 && record.detect_count > 0
}

/// The message flags of the frame of `record`.
pub fn message_flags(record: &ResultRecord) -> u16 {
    let mut flags = 0;
    if detected(record) {
        flags |= FLAG_DETECTED;
    }
    if record.actuate_request != 0 {
        flags |= FLAG_USER_REQUEST;
    }
    if record.slot_flags & SLOT_INCOMPLETE != 0 {
        flags |= FLAG_INCOMPLETE;
    }
    flags
}

/// A loop's outputs and the producer of its transmit ring.
pub struct Actuator {
    plan: ActuationPlan,
    writer: TxWriter,
}

impl Actuator {
    pub fn new(plan: ActuationPlan, writer: TxWriter) -> Self {
        Self { plan, writer }
    }

    pub fn plan(&self) -> &ActuationPlan {
        &self.plan
    }

    /// Forms the message of every output that fires for the frame of
    /// `record` (whose `user` words it carries) with the chain's final
    /// `samples`, stamped ready at `ready_ns`. Never waits: a full ring
    /// drops the message and counts it for its output.
    pub fn on_result(&mut self, record: &ResultRecord, samples: &[f32], ready_ns: u64) {
        let flags = message_flags(record);
        let user: &[u32; USER_RESULT_WORDS] = &record.user;
        for (i, out) in self.plan.outputs.iter().enumerate() {
            if !fires(out.when, record) {
                continue;
            }
            let input = MessageInput { output: i as u16, message_seq: 0, flags, record, user, samples };
            self.writer.offer(out.shape, input, record.stream_id, ready_ns);
        }
    }
}
