//! The resident loop's own shared structures, mirrored in `handlers/ring.cuh`:
//! the control block in mapped host memory ([`LoopControl`]), the loop state
//! in device memory ([`DeviceLoopState`]) and the parameters of the loop
//! kernels ([`LoopParams`]).

use crate::ring::layout::{ChainResult, FrameDesc, SlotHeader, USER_RESULT_WORDS};
use std::sync::atomic::{AtomicU64, Ordering};

/// Loop state values of [`LoopControl::state`].
pub const STATE_IDLE: u64 = 0;
pub const STATE_RUNNING: u64 = 1;
pub const STATE_TORN_DOWN: u64 = 2;
pub const STATE_TIMED_OUT: u64 = 3;

/// Stage marker values of [`LoopControl::stage`].
pub const STAGE_IDLE: u64 = 0;
pub const STAGE_HANDLER: u64 = 1;
pub const STAGE_CONTROLLER: u64 = 2;
/// Operator `i` of the workload is marked `STAGE_FIRST_OP + i`.
pub const STAGE_FIRST_OP: u64 = 3;
pub const STAGE_END_MARKER: u64 = 0xffff;

/// One 64-bit word on its own cache line.
#[repr(C, align(64))]
#[derive(Default)]
pub struct Line {
    pub v: AtomicU64,
    _pad: [u64; 7],
}

impl Line {
    pub fn load(&self) -> u64 {
        self.v.load(Ordering::Acquire)
    }
    pub fn store(&self, v: u64) {
        self.v.store(v, Ordering::Release)
    }
}

/// Control block shared with the GPU (mapped host memory). The host writes
/// `tear_down` and `data_ready`; the GPU writes the rest. Both sides access
/// every word atomically (the GPU with `.sys`-scope loads and stores).
#[repr(C, align(64))]
#[derive(Default)]
pub struct LoopControl {
    pub tear_down: Line,
    pub data_ready: Line,
    pub state: Line,
    pub stage: Line,
    pub stage_seq: Line,
    pub iterations: Line,
    pub idle_iterations: Line,
    pub frames: Line,
    pub skipped: Line,
    pub results: Line,
    pub handler_ns: Line,
    pub heartbeat_ns: Line,
}

/// Loop state in device memory (the host only initialises it before launch).
#[repr(C, align(64))]
#[derive(Debug, Clone, Copy, Default)]
pub struct DeviceLoopState {
    pub desc: FrameDesc,
    pub chain: ChainResult,
    pub _pad0: [u32; 8],
    pub slot: SlotHeader,
    pub last_claimed: u64,
    pub last_frame_ns: u64,
    pub result_seq: u64,
    pub handler_ns: u64,
    pub skipped: u64,
    pub verdict: u32,
    pub stop_state: u32,
    pub iterations: u64,
    pub idle_iterations: u64,
    pub frames: u64,
    /// `%globaltimer` when the handler last published the idle counters.
    pub counters_ns: u64,
    /// The frame's user result words, published in
    /// [`ResultRecord::user`](crate::ring::layout::ResultRecord::user);
    /// zeroed after each publish (and by a stand-alone user prologue).
    pub user: [u32; USER_RESULT_WORDS],
    /// A user kernel's `fl_user_result::request_actuation` (the word after
    /// `user`), published in `ResultRecord::actuate_request`; zeroed with `user`.
    pub actuate_request: u32,
    pub _pad_user: u32,
    /// The [`ParamControl::select`] value the handler last took (and acknowledged).
    pub param_select: u64,
    /// While frames stream into device memory: the device address of the
    /// received mark of the frame being pulled (0: none), written by the
    /// pull; the data-ready poll ends early once the mark passes
    /// `pull_watch_above`, so the next pull runs (kernels/stream.cuh).
    pub pull_watch_mark: u64,
    pub pull_watch_above: u64,
    /// Device address of the actuation former's state (`TxState`,
    /// [`super::actuation`]), 0 without actuation outputs.
    pub tx: u64,
    /// Device address of the chain's final samples where the result is
    /// published from the loop state (0: none), and how many floats it holds.
    pub act_samples: u64,
    pub act_capacity: u32,
    pub _pad_act: u32,
    pub _pad1: [u64; 1],
}

/// The live parameter banks' control block (mapped host memory; see
/// [`super::param_banks`]). The host writes `select`, the handler `ack`.
#[repr(C, align(64))]
#[derive(Default)]
pub struct ParamControl {
    /// `(bank << 32) | generation`: the bank frames claimed from now on run with.
    pub select: Line,
    /// The `select` value the handler took last: no frame runs with the other bank.
    pub ack: Line,
}

/// Parameters of the handler, controller and end-marker kernels (passed by value).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopParams {
    pub ring: u64,
    pub results: u64,
    pub ctl: u64,
    pub st: u64,
    pub poll_budget_ns: u64,
    pub poll_interval_ns: u64,
    pub sleep_ns: u64,
    pub timeout_ns: u64,
    pub if_handle: u64,
    pub while_handle: u64,
    pub slot_count: u32,
    pub slot_stride: u32,
    pub payload_capacity: u32,
    pub policy: u32,
    /// Record slots of the result ring ([`crate::ring::ResultRing::slots`]).
    pub result_capacity: u32,
    pub host_driven: u32,
    pub sync_with_host: u32,
    pub chain_flags: u32,
    pub handler_sets_if: u32,
    pub stage_markers: u32,
    /// Device address of the [`super::fused::FusedProgram`] the handler runs
    /// itself (the fused chain), or 0.
    pub program: u64,
    /// The parameter generation of the chain the graph runs; every result
    /// it publishes carries it (`ResultRecord::param_generation`).
    pub param_generation: u32,
    pub _reserved_generation: u32,
    /// Device address of the [`ParamControl`] (mapped), or 0: the loop has
    /// no parameter banks and every frame runs with `param_generation`.
    pub param_ctl: u64,
    /// Device address of bank 0; bank 1 follows `bank_bytes` later.
    pub banks: u64,
    pub bank_bytes: u32,
    pub _reserved_banks: u32,
}

const _: () = {
    assert!(std::mem::size_of::<LoopControl>() == 12 * 64);
    assert!(std::mem::size_of::<DeviceLoopState>().is_multiple_of(64));
    assert!(std::mem::size_of::<LoopParams>() == 160);
    assert!(std::mem::size_of::<ParamControl>() == 128);
};

/// Byte offsets of the device-side structures inside [`DeviceLoopState`].
pub const DESC_OFFSET: usize = std::mem::offset_of!(DeviceLoopState, desc);
pub const CHAIN_OFFSET: usize = std::mem::offset_of!(DeviceLoopState, chain);
pub const USER_OFFSET: usize = std::mem::offset_of!(DeviceLoopState, user);
pub const SLOT_OFFSET: usize = std::mem::offset_of!(DeviceLoopState, slot);

/// `(name, size or offset)` pairs the layout test checks against `ring.cuh`.
pub fn layout_facts() -> Vec<(String, usize)> {
    use super::fused::*;
    use crate::ring::layout::*;
    use std::mem::{offset_of, size_of};
    let mut v: Vec<(String, usize)> = vec![
        ("sizeof(RingHeader)".into(), size_of::<RingHeader>()),
        ("sizeof(SlotHeader)".into(), size_of::<SlotHeader>()),
        ("sizeof(ResultRingHeader)".into(), size_of::<ResultRingHeader>()),
        ("sizeof(ResultRecord)".into(), size_of::<ResultRecord>()),
        ("sizeof(FrameDesc)".into(), size_of::<FrameDesc>()),
        ("sizeof(ChainResult)".into(), size_of::<ChainResult>()),
        ("sizeof(LoopControl)".into(), size_of::<LoopControl>()),
        ("sizeof(DeviceLoopState)".into(), size_of::<DeviceLoopState>()),
        ("sizeof(LoopParams)".into(), size_of::<LoopParams>()),
        ("sizeof(ParamControl)".into(), size_of::<ParamControl>()),
        ("sizeof(FusedStep)".into(), size_of::<FusedStep>()),
        ("sizeof(FusedProgram)".into(), size_of::<FusedProgram>()),
        ("FL_FUSED_MAX_STEPS".into(), FUSED_MAX_STEPS),
        ("FL_FUSED_COEFFS".into(), FUSED_COEFFS),
        ("FL_SLOTS_OFFSET".into(), SLOTS_OFFSET),
        ("FL_SLOT_PAYLOAD_OFFSET".into(), SLOT_PAYLOAD_OFFSET),
        ("FL_SLOT_ALIGN".into(), SLOT_ALIGN),
        ("FL_RESULTS_OFFSET".into(), RESULTS_OFFSET),
        ("FL_RESULT_USER_WORDS".into(), USER_RESULT_WORDS),
        ("FL_RING_MAGIC".into(), RING_MAGIC as usize),
        ("FL_RING_LAYOUT_VERSION".into(), RING_LAYOUT_VERSION as usize),
        ("FL_RESULT_MAGIC".into(), RESULT_MAGIC as usize),
        ("FL_SLOT_COMPLETE".into(), SLOT_COMPLETE as usize),
        ("FL_SLOT_INCOMPLETE".into(), SLOT_INCOMPLETE as usize),
        ("FL_SLOT_TIMED_OUT".into(), SLOT_TIMED_OUT as usize),
        ("FL_POLICY_EVERY".into(), POLICY_EVERY as usize),
        ("FL_POLICY_LATEST".into(), POLICY_LATEST as usize),
        ("FL_RESULT_HAS_STATS".into(), RESULT_HAS_STATS as usize),
        ("FL_RESULT_HAS_DETECT".into(), RESULT_HAS_DETECT as usize),
        ("FL_RESULT_GPU_CLOCK".into(), RESULT_GPU_CLOCK as usize),
        ("FL_STATE_IDLE".into(), STATE_IDLE as usize),
        ("FL_STATE_RUNNING".into(), STATE_RUNNING as usize),
        ("FL_STATE_TORN_DOWN".into(), STATE_TORN_DOWN as usize),
        ("FL_STATE_TIMED_OUT".into(), STATE_TIMED_OUT as usize),
        ("FL_STAGE_FIRST_OP".into(), STAGE_FIRST_OP as usize),
        ("FL_STAGE_END_MARKER".into(), STAGE_END_MARKER as usize),
    ];
    {
        use crate::actuate::ring::*;
        use crate::wire::actuation as act;
        v.extend([
            ("sizeof(TxRingHeader)".into(), size_of::<TxRingHeader>()),
            ("sizeof(TxSlotHeader)".into(), size_of::<TxSlotHeader>()),
            ("FL_TX_MAGIC".into(), TX_MAGIC as usize),
            ("FL_TX_LAYOUT_VERSION".into(), TX_LAYOUT_VERSION as usize),
            ("FL_TX_SLOTS_OFFSET".into(), TX_SLOTS_OFFSET),
            ("FL_TX_DATAGRAM_OFFSET".into(), TX_DATAGRAM_OFFSET),
            ("FL_TX_MAX_OUTPUTS".into(), TX_MAX_OUTPUTS),
            ("FL_ACT_MAGIC".into(), u32::from_le_bytes(act::MAGIC) as usize),
            ("FL_ACT_VERSION".into(), act::VERSION as usize),
            ("FL_ACT_HEADER_LEN".into(), act::HEADER_LEN),
            ("sizeof(ActuationHeader)".into(), act::HEADER_LEN),
            ("FL_ACT_PART_RECORD".into(), act::PART_RECORD as usize),
            ("FL_ACT_PART_USER".into(), act::PART_USER as usize),
            ("FL_ACT_PART_SAMPLES".into(), act::PART_SAMPLES as usize),
            ("FL_ACT_FLAG_DETECTED".into(), act::FLAG_DETECTED as usize),
            ("FL_ACT_FLAG_USER_REQUEST".into(), act::FLAG_USER_REQUEST as usize),
            ("FL_ACT_FLAG_INCOMPLETE".into(), act::FLAG_INCOMPLETE as usize),
            ("FL_ACT_FLAG_SAMPLES_SHORT".into(), act::FLAG_SAMPLES_SHORT as usize),
        ]);
        for (field, offset) in act::HEADER_FIELDS {
            v.push((format!("offsetof(ActuationHeader, {field})"), *offset));
        }
    }
    macro_rules! offsets {
        ($t:ident: $($f:ident),*) => { $( v.push((format!("offsetof({}, {})", stringify!($t), stringify!($f)), offset_of!($t, $f))); )* };
    }
    offsets!(RingHeader: magic, version, slot_count, slot_stride, payload_capacity, policy, slots_offset, head_seq, claimed_seq, consumed_seq);
    offsets!(SlotHeader: ring_seq, frame_seq, stream_id, flags, payload_len, packets_expected, packets_received, sender_ts_ns, first_rx_ns, last_rx_ns, published_ns, received_mark);
    offsets!(ResultRingHeader: magic, capacity, head_seq);
    {
        use crate::actuate::ring::{TxRingHeader, TxSlotHeader};
        offsets!(TxRingHeader: magic, version, slot_count, slot_stride, max_datagram, head_seq, consumed_seq, dropped);
        offsets!(TxSlotHeader: seq, ready_ns, len, output, stream_id);
    }
    offsets!(ResultRecord: result_seq, ring_seq, frame_seq, stream_id, slot_flags, sender_ts_ns, first_rx_ns, last_rx_ns, published_ns, detect_ns, done_ns, sum, min, max, mean, detect_count, first_detect_index, output_len, result_flags, skipped_before, user, param_generation, actuate_request);
    offsets!(FrameDesc: payload_dptr, slot_dptr, ring_seq, payload_len, n_samples, detect_ns, skipped, params_dptr, param_generation);
    offsets!(ChainResult: sum, min, max, mean, detect_count, first_detect_index);
    offsets!(LoopControl: tear_down, data_ready, state, stage, stage_seq, iterations, idle_iterations, frames, skipped, results, handler_ns, heartbeat_ns);
    offsets!(DeviceLoopState: desc, chain, slot, last_claimed, last_frame_ns, result_seq, handler_ns, skipped, verdict, stop_state, iterations, idle_iterations, frames, counters_ns, user, actuate_request, param_select, pull_watch_mark, pull_watch_above, tx, act_samples, act_capacity);
    offsets!(LoopParams: ring, results, ctl, st, poll_budget_ns, poll_interval_ns, sleep_ns, timeout_ns, if_handle, while_handle, slot_count, slot_stride, payload_capacity, policy, result_capacity, host_driven, sync_with_host, chain_flags, handler_sets_if, stage_markers, program, param_generation, param_ctl, banks, bank_bytes);
    offsets!(ParamControl: select, ack);
    {
        use super::actuation::{TxOutput, TxState};
        v.extend([
            ("sizeof(TxState)".into(), size_of::<TxState>()),
            ("sizeof(TxOutput)".into(), size_of::<TxOutput>()),
            ("FL_ACT_WHEN_EVERY".into(), super::actuation::WHEN_EVERY as usize),
            ("FL_ACT_WHEN_DETECTION".into(), super::actuation::WHEN_DETECTION as usize),
            ("FL_ACT_WHEN_FLAG".into(), super::actuation::WHEN_FLAG as usize),
        ]);
        offsets!(TxState: ring, slot_count, slot_stride, max_datagram, outputs, head, consumed, message_seq, out);
        offsets!(TxOutput: when, parts, samples);
    }
    offsets!(FusedStep: kind, input, output, count, a, b, delay_ns, coeffs);
    offsets!(FusedProgram: step_count, capacity, stage_bytes, shared_buffers, buffers, steps);
    v
}

/// A CUDA translation unit that checks `ring.cuh` against the Rust layout:
/// sizes and constants through `static_assert` (compilation fails on a
/// mismatch), field offsets through the kernel `fl_layout_offsets`, which
/// stores each offset (folded to a constant by the compiler) into `out[i]`;
/// the layout test reads those constants back from the PTX (NVRTC has no
/// `offsetof` usable in a constant expression).
pub fn layout_check_source() -> String {
    let mut s = String::from(
        "#include \"actuation.cuh\"\n#define FL_OFF(T, f) ((unsigned long long)((const char*)&((const T*)base)->f - (const char*)base))\n",
    );
    let mut stores = String::new();
    let mut i = 0;
    for (expr, value) in layout_facts() {
        match expr.strip_prefix("offsetof(").and_then(|r| r.strip_suffix(')')) {
            Some(args) => {
                stores.push_str(&format!("  out[{i}] = FL_OFF({args});\n"));
                i += 1;
            }
            None => s.push_str(&format!(
                "static_assert((unsigned long long)({expr}) == {value}ull, \"{expr} is {value} in Rust\");\n"
            )),
        }
    }
    s.push_str(
        "extern \"C\" __global__ void fl_layout_offsets(const char* base, unsigned long long* out) {\n",
    );
    s.push_str(&stores);
    s.push_str("}\n");
    s
}

/// The offsets [`layout_facts`] expects, in the order `fl_layout_offsets` stores them.
pub fn expected_offsets() -> Vec<(String, usize)> {
    layout_facts().into_iter().filter(|(e, _)| e.starts_with("offsetof(")).collect()
}

/// Reads the constants `fl_layout_offsets` stores out of its PTX: `out[i]` is
/// the value of the `mov.u64 %rdN, V;` whose register the store
/// `st.global.u64 [%rdM+8i], %rdN;` writes. `None` if a store is not a constant.
pub fn parse_ptx_offsets(ptx: &str) -> Option<Vec<usize>> {
    let mut regs = std::collections::HashMap::new();
    let mut out: Vec<Option<usize>> = Vec::new();
    for line in ptx.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("mov.u64") {
            let (reg, val) = rest.trim().trim_end_matches(';').split_once(',')?;
            if let Ok(v) = val.trim().parse::<usize>() {
                regs.insert(reg.trim().to_string(), v);
            }
        } else if let Some(rest) = line.strip_prefix("st.global.u64") {
            let (addr, reg) = rest.trim().trim_end_matches(';').split_once(',')?;
            let addr = addr.trim().trim_start_matches('[').trim_end_matches(']');
            let byte: usize = addr.split_once('+').map_or(Some(0), |(_, k)| k.parse().ok())?;
            let index = byte / 8;
            if out.len() <= index {
                out.resize(index + 1, None);
            }
            out[index] = Some(*regs.get(reg.trim())?);
        }
    }
    out.into_iter().collect()
}
