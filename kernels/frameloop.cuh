// frameloop.cuh: the C ABI of user code (docs/operators.md).
//
// A user kernel is a chain operator written in CUDA and named in the config
// (`[[chain]] op = "kernel"`): an extern "C" __global__ function with the
// fl_kernel_fn signature below. It reads the f32 samples of the operator
// before it and writes its own f32 samples for the operator after it.
//
// A data-ready handler decides whether a ring slot holds a new frame: a
// __device__ function with the fl_handler_fn signature below.
//
// NVRTC compiles user sources without toolkit headers: the fixed-width
// integer types come from prelude.cuh, included here. Every structure below
// has a fixed size (static_assert at the end) and only grows by using its
// reserved fields; FL_ABI_VERSION changes when a size or meaning changes.
#pragma once
#include "prelude.cuh"

#define FL_ABI_VERSION 2u  // 2: fl_user_result gained request_actuation

// fl_frame::flags (the same bits as the frame ring's slot flags).
#define FL_FRAME_COMPLETE (1u << 0)    // every packet of the frame arrived
#define FL_FRAME_INCOMPLETE (1u << 1)  // packets are missing: the missing bytes are zero
#define FL_FRAME_TIMED_OUT (1u << 2)   // published by the assembly timeout, not by its last packet

// The frame an operator runs on. In device memory, one per operator,
// rewritten by the appliance (fl_user_prologue, kernels/user_support.cu)
// right before the kernel runs on each frame: a kernel reads everything that changes
// from frame to frame here, because its arguments are fixed once, when the
// resident graph is built.
struct fl_frame {
  uint64_t sequence;       // the sensor's frame sequence number
  uint64_t ring_sequence;  // the frame's position in the frame ring (1, 2, ...)
  uint64_t sender_ts_ns;   // the sender's timestamp (ns since the Unix epoch), 0 if none
  uint32_t stream_id;      // the sensor stream
  uint32_t length_bytes;   // payload bytes received (at most the slot's capacity)
  uint32_t flags;          // FL_FRAME_*
  uint32_t in_count;       // samples in `in` this frame (clamped to the input buffer)
  uint32_t out_count;      // samples to write to `out` this frame (clamped to the output buffer)
  uint32_t _reserved0;
  uint64_t _reserved[2];
};

// Per-frame values a kernel may write; zeroed for each frame before the
// chain's first user kernel runs, they travel with the frame's result record
// (ResultRecord::user) to the host. Kernels of one chain
// share it: agree on which words each writes.
#define FL_USER_RESULT_WORDS 12
struct fl_user_result {
  uint32_t words[FL_USER_RESULT_WORDS];
  // Set non-zero to send this frame's actuation outputs configured with
  // when = "flag" (docs/actuation.md); zeroed for each frame like the words.
  uint32_t request_actuation;
};

// The user kernel signature:
//
//   extern "C" __global__ void NAME(const fl_frame* frame, const float* in, float* out,
//                                   const void* params, fl_user_result* user);
//
// frame:  this frame (above); in_count and out_count say how many samples to
//         read and write.
// in:     the input samples (device memory, frame->in_count of them).
// out:    the output samples (device memory, frame->out_count of them;
//         `output` in the config sizes this buffer). Never the same memory as `in`.
// params: the parameter struct in device memory, laid out as `param_types`
//         declares it (C layout, natural alignment); cast it to the struct
//         the kernel declares with FL_PARAMS. Null when there are none.
// user:   this frame's user result words, and its actuation request.
//
// The launch is one thread per output sample in blocks of 256 threads unless
// the config fixes `threads` and/or `blocks`; with a fixed grid, loop over
// the samples with fl_thread_index/fl_thread_count. Every pointer is the same
// for every frame.
typedef void (*fl_kernel_fn)(const fl_frame* frame, const float* in, float* out, const void* params,
                             fl_user_result* user);

// The kernel's parameter struct: `const Gain* p = FL_PARAMS(Gain, params);`.
#define FL_PARAMS(type, params) (static_cast<const type*>(params))

// This thread's index in the whole grid, and the grid's thread count.
FL_DEVICE uint32_t fl_thread_index() { return blockIdx.x * blockDim.x + threadIdx.x; }
FL_DEVICE uint32_t fl_thread_count() { return gridDim.x * blockDim.x; }

// Asks for this frame's actuation outputs configured with when = "flag"
// (docs/actuation.md): the same as setting user->request_actuation. Any
// thread of any user kernel of the chain may ask; the request lasts the frame.
FL_DEVICE void fl_request_actuation(fl_user_result* user) { user->request_actuation = 1u; }

// ---- data-ready handlers ----

// Words of metadata at the start of every ring slot (128 bytes). The built-in
// ring writer keeps its slot header there; a sensor that writes the ring
// itself (a DMA engine) keeps whatever it writes there, in its own format.
#define FL_SLOT_META_WORDS 32

// The slot a handler looks at.
struct fl_slot {
  const uint32_t* meta;    // the slot's FL_SLOT_META_WORDS metadata words (read with fl_meta_word)
  const uint8_t* payload;  // the slot's payload
  uint32_t index;          // which slot, 0 .. slot_count - 1
  uint32_t slot_count;     // slots in the ring
  uint32_t capacity;       // payload bytes the slot holds
  uint32_t _reserved0;
};

// State a handler keeps between calls: zero when the loop starts, then only
// the handler writes it.
struct fl_handler_state {
  uint64_t words[8];
};

// The data-ready handler signature:
//
//   __device__ uint32_t NAME(const fl_slot* slot, fl_handler_state* state, fl_frame* frame);
//
// Run by one thread, once per poll, with the slot the next frame is due in
// (the slots fill in turn: 0, 1, ..., slot_count - 1, 0, ...). When that slot
// holds a frame the handler has not reported yet it fills frame->sequence,
// stream_id, length_bytes and flags and returns 1 (the appliance fills the
// rest, clamps length_bytes to the slot's capacity and moves on to the next
// slot); otherwise it returns 0 and is asked again. It must not wait: the
// loop's poll budget and tear-down are the appliance's.
typedef uint32_t (*fl_handler_fn)(const fl_slot* slot, fl_handler_state* state, fl_frame* frame);

// Metadata word `i` of a slot, with acquire ordering at system scope: the
// payload written before it (by the host or by a device's DMA) is visible
// once the word is.
FL_DEVICE uint32_t fl_meta_word(const fl_slot* slot, uint32_t i) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(slot->meta + i) : "memory");
  return v;
}

// A big-endian 32-bit value (as many sensors write it) in host order.
FL_DEVICE uint32_t fl_be32(uint32_t v) { return __byte_perm(v, 0u, 0x0123u); }

// For the appliance's checks of an entry's signature: fl_same<A, B>::value.
template <class A, class B>
struct fl_same {
  static const bool value = false;
};
template <class A>
struct fl_same<A, A> {
  static const bool value = true;
};

static_assert(sizeof(fl_frame) == 64, "fl_frame");
static_assert(sizeof(fl_user_result) == 52, "fl_user_result: 12 words, then the actuation request");
static_assert(sizeof(fl_slot) == 32, "fl_slot");
static_assert(sizeof(fl_handler_state) == 64, "fl_handler_state");
