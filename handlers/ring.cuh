// frameloop shared layout: the CUDA mirror of src/ring/layout.rs (frame ring,
// slots, result ring, frame descriptor, chain result) and of the loop's control
// structures in src/gpu/control.rs. tests/gpu_layout.rs compiles a program that
// checks every size and offset below against the Rust values.
#pragma once
#include "prelude.cuh"

#define FL_RING_MAGIC 0x474e5246u  // "FRNG" little-endian
#define FL_RING_LAYOUT_VERSION 1u
#define FL_SLOTS_OFFSET 256u
#define FL_SLOT_PAYLOAD_OFFSET 128u
#define FL_SLOT_ALIGN 256u

#define FL_SLOT_COMPLETE (1u << 0)
#define FL_SLOT_INCOMPLETE (1u << 1)
#define FL_SLOT_TIMED_OUT (1u << 2)

#define FL_POLICY_EVERY 0u
#define FL_POLICY_LATEST 1u

#define FL_RESULT_MAGIC 0x53525246u  // "FRRS"
#define FL_RESULT_HAS_STATS (1u << 0)
#define FL_RESULT_HAS_DETECT (1u << 1)
#define FL_RESULT_GPU_CLOCK (1u << 2)
#define FL_RESULTS_OFFSET 128u
// Words of a frame's user result (fl_user_result in kernels/frameloop.cuh).
#define FL_RESULT_USER_WORDS 12

struct alignas(64) RingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t payload_capacity;
  uint32_t policy;
  uint32_t slots_offset;
  uint32_t _reserved0[9];
  uint64_t head_seq;  // writer: release store
  uint64_t _pad1[7];
  uint64_t claimed_seq;  // consumer: store before reading the slot
  uint64_t _pad2[7];
  uint64_t consumed_seq;  // consumer: release store when done
  uint64_t _pad3[7];
};

struct alignas(64) SlotHeader {
  uint64_t ring_seq;
  uint64_t frame_seq;
  uint32_t stream_id;
  uint32_t flags;
  uint32_t payload_len;
  uint32_t packets_expected;
  uint32_t packets_received;
  uint32_t _reserved0;
  uint64_t sender_ts_ns;
  uint64_t first_rx_ns;
  uint64_t last_rx_ns;
  uint64_t published_ns;
  uint64_t received_mark;  // (ring_seq low 32 bits) << 32 | received prefix bytes; release store
  uint64_t _reserved1[6];
};

struct alignas(64) ResultRingHeader {
  uint32_t magic;
  uint32_t capacity;
  uint32_t _reserved0[14];
  uint64_t head_seq;  // producer: release store
  uint64_t _pad1[7];
};

struct alignas(64) ResultRecord {
  uint64_t result_seq;
  uint64_t ring_seq;
  uint64_t frame_seq;
  uint32_t stream_id;
  uint32_t slot_flags;
  uint64_t sender_ts_ns;
  uint64_t first_rx_ns;
  uint64_t last_rx_ns;
  uint64_t published_ns;
  uint64_t detect_ns;
  uint64_t done_ns;
  float sum;
  float min;
  float max;
  float mean;
  uint32_t detect_count;
  int32_t first_detect_index;
  uint32_t output_len;
  uint32_t result_flags;
  uint64_t skipped_before;
  uint32_t user[FL_RESULT_USER_WORDS];  // the frame's fl_user_result words (kernels/frameloop.cuh)
  uint32_t param_generation;  // parameter generation the frame ran with (LoopParams::param_generation)
  uint32_t actuate_request;   // non-zero: a user kernel asked for an actuation (ResultRecord::actuate_request)
};

// Filled by the data-ready handler for the frame of this loop iteration; every
// operator kernel receives a pointer to it.
struct alignas(64) FrameDesc {
  uint64_t payload_dptr;  // device address of the claimed slot's payload
  uint64_t slot_dptr;     // device address of the claimed slot's SlotHeader
  uint64_t ring_seq;
  uint32_t payload_len;  // clamped to the slot capacity
  uint32_t n_samples;    // written by the unpack kernel
  uint64_t detect_ns;    // %globaltimer when the handler claimed the slot
  uint64_t skipped;      // frames skipped to reach this one (policy latest)
  uint64_t params_dptr;  // the parameter bank this frame runs with (device memory), 0 without banks
  uint32_t param_generation;  // the parameter generation of that bank
  uint32_t _reserved;
};

// Reduction values of one frame. The handler resets it when it claims a frame
// to {sum 0, min +inf, max -inf, mean 0, detect_count 0, first_detect_index -1}.
struct ChainResult {
  float sum;
  float min;
  float max;
  float mean;
  uint32_t detect_count;
  int32_t first_detect_index;
  uint32_t _reserved[2];
};

// ---- the resident loop's own structures (src/gpu/control.rs) ----

#define FL_STATE_IDLE 0ull
#define FL_STATE_RUNNING 1ull
#define FL_STATE_TORN_DOWN 2ull
#define FL_STATE_TIMED_OUT 3ull

// Handler verdicts (DeviceLoopState::verdict).
#define FL_VERDICT_NONE 0u
#define FL_VERDICT_READY 1u
#define FL_VERDICT_STOP 2u

// Stage marker values (LoopControl::stage): 0 idle, 1 handler, 2 controller,
// 3 + i operator i of the workload, 0xffff end marker.
#define FL_STAGE_IDLE 0ull
#define FL_STAGE_HANDLER 1ull
#define FL_STAGE_CONTROLLER 2ull
#define FL_STAGE_FIRST_OP 3ull
#define FL_STAGE_END_MARKER 0xffffull

// Control block in mapped host memory; every field owns a 64-byte line.
// host -> GPU: tear_down, data_ready. GPU -> host: everything else.
struct alignas(64) FlLine {
  uint64_t v;
  uint64_t _pad[7];
};

struct alignas(64) LoopControl {
  FlLine tear_down;        // host sets 1 to stop the loop
  FlLine data_ready;       // host-driven mode: host sets 1 per frame, handler takes it
  FlLine state;            // FL_STATE_*
  FlLine stage;            // last stage marker written
  FlLine stage_seq;        // ring sequence the marker refers to
  FlLine iterations;       // loop iterations
  FlLine idle_iterations;  // iterations that found no frame
  FlLine frames;           // frames the chain ran on
  FlLine skipped;          // frames skipped under policy latest
  FlLine results;          // results published (result-ready counter)
  FlLine handler_ns;       // ns spent inside the data-ready handler (GPU busy while idle)
  FlLine heartbeat_ns;     // %globaltimer at the last controller run
};

// The actuation former (handlers/actuation.cuh, included at the end of
// this file): fl_publish_record runs it after each result.
struct TxState;
struct ResultRecord;
FL_DEVICE void fl_actuate(TxState* tx, const ResultRecord& r, const float* samples, uint32_t n);

// Device-memory state of the loop.
struct alignas(64) DeviceLoopState {
  FrameDesc desc;
  ChainResult chain;
  uint32_t _pad0[8];
  SlotHeader slot;  // copy of the claimed slot header
  uint64_t last_claimed;
  uint64_t last_frame_ns;  // %globaltimer of the last claim (timeout reference)
  uint64_t result_seq;
  uint64_t handler_ns;  // accumulated handler time, published by the controller
  uint64_t skipped;     // accumulated skipped frames
  uint32_t verdict;     // FL_VERDICT_* of the current iteration
  uint32_t stop_state;  // FL_STATE_* to publish when stopping
  uint64_t iterations;
  uint64_t idle_iterations;
  uint64_t frames;
  uint64_t counters_ns;  // %globaltimer when the handler last published the counters
  uint32_t user[FL_RESULT_USER_WORDS];  // the frame's user result words: zeroed after each publish (and by
                                       // a prologue), published in ResultRecord::user
  uint32_t actuate_request;  // fl_user_result::request_actuation: follows the words, zeroed with them
  uint32_t _pad_user;
  uint64_t param_select;  // the ParamControl::select value the handler last took (and acknowledged)
  // While frames stream into device memory (kernels/stream.cuh): the received
  // mark of the frame being pulled (mapped), and the value it must pass for a
  // pull to have new words to copy. The poll ends early when it does, so the
  // pull runs (fl_poll_watching). Null: nothing to watch.
  const uint64_t* pull_watch_mark;
  uint64_t pull_watch_above;
  // The loop's actuation outputs (handlers/actuation.cuh), or null: the
  // former's state, and where the chain's final samples are when the
  // result is published from the loop state (fl_publish_result).
  TxState* tx;
  const float* act_samples;
  uint32_t act_capacity;  // floats act_samples holds
  uint32_t _pad_act;
  uint64_t _pad1[1];
};

// The live parameter banks (src/gpu/param_banks.rs): two copies of the
// chain's tunable values in device memory; the host rewrites the bank no
// frame uses, then publishes it here. Mapped host memory, one line each.
#define FL_SELECT_BANK(sel) ((uint32_t)((sel) >> 32) & 1u)
#define FL_SELECT_GENERATION(sel) ((uint32_t)(sel))
struct alignas(64) ParamControl {
  FlLine select;  // host -> GPU: (bank << 32) | generation, taken when the handler claims a frame
  FlLine ack;     // GPU -> host: the select value the handler took last (no frame uses the other bank)
};

// The fused chain (kernels/fused.cu): the built-in operators of a chain as
// steps that one block runs in the handler's own kernel
// (src/gpu/fused.rs builds it).
#define FL_FUSED_MAX_STEPS 16
#define FL_FUSED_COEFFS 64
#define FL_STEP_UNPACK_U8 1u
#define FL_STEP_UNPACK_U16 2u
#define FL_STEP_UNPACK_U12 3u
#define FL_STEP_FIR 4u
#define FL_STEP_FILTER2D 5u
#define FL_STEP_STATS 6u
#define FL_STEP_THRESHOLD 7u
#define FL_STEP_STATS_THRESHOLD 8u
#define FL_STEP_DELAY 9u
// Diagnostic, for tests of fault reporting (never built from a config):
// writes to an illegal address once the frame's ring sequence reaches `count`.
#define FL_STEP_FAULT_AT 10u

struct FusedStep {
  uint32_t kind;     // FL_STEP_*
  uint32_t input;    // buffer the step reads (0 or 1; not unpack, delay)
  uint32_t output;   // buffer the step writes (unpack, fir, filter2d)
  uint32_t count;    // fir: taps; filter2d: row width; fault_at: ring sequence
  float a;           // unpack: scale; threshold: level
  float b;           // unpack: offset
  uint64_t delay_ns; // delay
  float coeffs[FL_FUSED_COEFFS];  // fir taps, or the 3x3 kernel row-major
};

struct FusedProgram {
  uint32_t step_count;      // <= FL_FUSED_MAX_STEPS
  uint32_t capacity;        // floats each buffer holds
  uint32_t stage_bytes;     // 0, or copy this much of the slot payload into shared memory first
  uint32_t shared_buffers;  // 1: the two buffers live in dynamic shared memory, after the staged payload
  float* buffers[2];        // device memory (when not shared)
  FusedStep steps[FL_FUSED_MAX_STEPS];
};

// Parameters of the handler, controller and end-marker kernels (by value).
struct LoopParams {
  RingHeader* ring;            // frame ring, device address (mapped)
  ResultRingHeader* results;   // result ring, device address (mapped)
  LoopControl* ctl;            // control block, device address (mapped)
  DeviceLoopState* st;         // device memory
  uint64_t poll_budget_ns;     // poll this long per iteration before giving up
  uint64_t poll_interval_ns;   // __nanosleep between polls (0 = spin)
  uint64_t sleep_ns;           // Holoscan-style sleep when no data was found
  uint64_t timeout_ns;         // tear down after this long without a frame (0 = never)
  cudaGraphConditionalHandle if_handle;
  cudaGraphConditionalHandle while_handle;
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t payload_capacity;
  uint32_t policy;
  uint32_t result_capacity;    // record slots of the result ring (capacity + 1)
  uint32_t host_driven;        // 1: wait for LoopControl::data_ready from the host
  uint32_t sync_with_host;     // 1: __threadfence_system before raising result-ready
  uint32_t chain_flags;        // FL_RESULT_HAS_* of the chain
  uint32_t handler_sets_if;    // 1: the handler sets the IF value and does the controller's work (no controller node)
  uint32_t stage_markers;      // 1: stage marker kernels run between operators
  const FusedProgram* program; // the fused chain the handler runs itself (device memory), or null
  uint32_t param_generation;   // parameter generation of the chain this graph runs (ResultRecord::param_generation)
  uint32_t _reserved_generation;
  ParamControl* param_ctl;     // the parameter banks' control block (mapped), or null: no banks
  const uint8_t* banks;        // bank 0 (device memory); bank 1 follows at banks + bank_bytes
  uint32_t bank_bytes;
  uint32_t _reserved_banks;
};

static_assert(sizeof(RingHeader) == 256, "RingHeader");
static_assert(sizeof(SlotHeader) == FL_SLOT_PAYLOAD_OFFSET, "SlotHeader");
static_assert(sizeof(ResultRingHeader) == FL_RESULTS_OFFSET, "ResultRingHeader");
static_assert(sizeof(ResultRecord) == 192, "ResultRecord");
static_assert(sizeof(FrameDesc) == 64, "FrameDesc");
static_assert(sizeof(ChainResult) == 32, "ChainResult");
static_assert(sizeof(LoopControl) == 12 * 64, "LoopControl");
static_assert(sizeof(FusedStep) == 288, "FusedStep");
static_assert(sizeof(LoopParams) == 160, "LoopParams");
static_assert(sizeof(ParamControl) == 128, "ParamControl");

// Device address of the slot holding ring sequence `seq` (>= 1).
FL_DEVICE uint64_t fl_slot_dptr(const LoopParams& p, uint64_t seq) {
  return (uint64_t)p.ring + FL_SLOTS_OFFSET + ((seq - 1) % p.slot_count) * (uint64_t)p.slot_stride;
}

// How often, at most, the handler publishes its counters from idle
// iterations (frame iterations publish theirs when the result is out).
#define FL_COUNTER_PUBLISH_NS 50000ull

// The ResultRecord of result `seq`, from the slot header copy `s`, the frame
// descriptor `d`, the chain result `c` and the loop state's user words;
// done_ns is the time of the call.
FL_DEVICE ResultRecord fl_make_record(const LoopParams& p, const FrameDesc& d, const ChainResult& c,
                                      const SlotHeader& s, uint64_t seq) {
  ResultRecord r;
  r.result_seq = seq;
  r.ring_seq = d.ring_seq;
  r.frame_seq = s.frame_seq;
  r.stream_id = s.stream_id;
  r.slot_flags = s.flags;
  r.sender_ts_ns = s.sender_ts_ns;
  r.first_rx_ns = s.first_rx_ns;
  r.last_rx_ns = s.last_rx_ns;
  r.published_ns = s.published_ns;
  r.detect_ns = d.detect_ns;
  const bool stats = (p.chain_flags & FL_RESULT_HAS_STATS) != 0;
  const bool detect = (p.chain_flags & FL_RESULT_HAS_DETECT) != 0;
  r.sum = stats ? c.sum : 0.0f;
  r.min = stats ? c.min : 0.0f;
  r.max = stats ? c.max : 0.0f;
  r.mean = stats ? c.mean : 0.0f;
  r.detect_count = detect ? c.detect_count : 0u;
  r.first_detect_index = detect ? c.first_detect_index : -1;
  r.output_len = d.n_samples;
  r.result_flags = p.chain_flags | FL_RESULT_GPU_CLOCK;
  r.skipped_before = d.skipped;
#pragma unroll
  for (int i = 0; i < FL_RESULT_USER_WORDS; ++i) r.user[i] = p.st->user[i];
  r.param_generation = p.param_ctl != nullptr ? d.param_generation : p.param_generation;
  r.actuate_request = p.st->actuate_request;
  r.done_ns = fl_globaltimer();
  return r;
}

// Publishes result `seq`: builds its ResultRecord (fl_make_record), writes it
// into the mapped result ring (after a fence ordering the previous head
// before it, the protocol of src/ring/result_ring.rs), releases the result
// head (the only ordering the host waits on), then hands the slot back to the
// writer and raises result-ready. Last, when the loop has actuation outputs
// (st->tx), it forms the frame's messages (fl_actuate) with the chain's
// final samples: `samples` (null: none), at most `capacity` of them. Run by
// one thread.
FL_DEVICE void fl_publish_record(const LoopParams& p, const FrameDesc& d, const ChainResult& c,
                                 const SlotHeader& s, uint64_t seq, const float* samples, uint32_t capacity) {
  const ResultRecord r = fl_make_record(p, d, c, s, seq);

  // p.result_capacity is the ring's slot count: one more than the results the
  // host reader may lag, so it never accepts the slot being rewritten here.
  ResultRecord* slot = (ResultRecord*)((char*)p.results + FL_RESULTS_OFFSET) + (seq - 1) % p.result_capacity;
  // The host reader trusts a copy of record s only while the head it reads
  // afterwards is below s + capacity (= seq - 1 for this rewrite of s's slot):
  // so the release of head seq - 1 must be visible before any store below.
  // With sync_with_host the previous publish ended with a system fence that
  // already ordered it; without, fence here.
  if (!p.sync_with_host) fl_fence_release_sys();
  // Twelve 16-byte stores; the release store of the head below orders them.
  const uint4* from = (const uint4*)&r;
  uint4* to = (uint4*)slot;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(ResultRecord) / sizeof(uint4)); ++i) to[i] = from[i];
  fl_store_release_sys(&p.results->head_seq, seq);
  // The release above already ordered every earlier access of the frame (the
  // kernels that read the slot finished before this one ran), so the slot
  // goes back with a relaxed store: one system fence per frame, not two.
  fl_store_relaxed_sys(&p.ring->consumed_seq, d.ring_seq);
  if (p.sync_with_host) __threadfence_system();
  fl_store_relaxed_sys(&p.ctl->results.v, seq);
  // The loop's last step for the frame: its actuation messages, formed
  // after the result so they add nothing to the result's latency.
  TxState* tx = p.st->tx;
  if (tx != nullptr) {
    const uint32_t n = samples == nullptr ? 0u : (d.n_samples < capacity ? d.n_samples : capacity);
    fl_actuate(tx, r, samples, n);
  }
}

// fl_publish_record of the loop state's frame, numbered after the last
// result: what the end marker kernel, or the epilogue of the chain's last
// built-in kernel, runs (one thread), with the final samples the host noted
// in the loop state. It then zeroes the user result words and the
// actuation request for the next frame: a user kernel wrapped into its entry kernel
// (gpu::user::kernel) finds them zero without a node of its own to clear them
// (the loop state starts zeroed).
FL_DEVICE void fl_publish_result(const LoopParams& p) {
  DeviceLoopState* st = p.st;
  const uint64_t seq = st->result_seq + 1;
  st->result_seq = seq;
  fl_publish_record(p, st->desc, st->chain, st->slot, seq, st->act_samples, st->act_capacity);
#pragma unroll
  for (int i = 0; i < FL_RESULT_USER_WORDS; ++i) st->user[i] = 0u;
  st->actuate_request = 0u;
}

// The actuation former's definitions (fl_actuate, declared above).
#include "actuation.cuh"

