// user_support: what the appliance runs around a user kernel (an
// `op = "kernel"` chain entry, kernels/frameloop.cuh). In front of each user
// kernel, fl_user_prologue fills the operator's fl_frame from the claimed
// slot's header (the chain's first user kernel) or from the first user
// kernel's fl_frame (the others: device memory, no second read of the slot)
// and the FrameDesc, clamps the sample counts to the operator's buffers,
// and makes the FrameDesc's sample count the operator's output count for
// the operators after it. The first user kernel's prologue also zeroes the
// frame's user result words.
#include "ops_common.cuh"
#include "frameloop.cuh"

// Threads of the one block of fl_user_prologue (one warp).
#define FL_USER_PROLOGUE_THREADS 32

// The 16-byte words of the slot header the prologue reads: its first 48
// bytes, ring_seq to sender_ts_ns (sender_ts_ns at offset 40, checked in gpu::user_kernel).
#define FL_USER_SLOT_WORDS 3

static_assert(FL_USER_RESULT_WORDS == FL_RESULT_USER_WORDS, "fl_user_result is the record's user words");

// fd: the FrameDesc; frame: this operator's fl_frame; first: the chain's
// first user kernel's fl_frame, already filled for this frame, or null for
// that kernel itself (which reads the slot header and zeroes `user`, the
// frame's user result words); in_capacity / out_capacity: floats the
// operator's input and output buffers hold; fixed_out: output samples per
// frame (`output = { samples = N }`), 0 for `output = "same"`. One block of
// FL_USER_PROLOGUE_THREADS.
extern "C" __global__ void __launch_bounds__(FL_USER_PROLOGUE_THREADS)
    fl_user_prologue(FrameDesc* fd, fl_frame* frame, const fl_frame* first, fl_user_result* user,
                     uint32_t in_capacity, uint32_t out_capacity, uint32_t fixed_out) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  __shared__ alignas(64) uint4 head[FL_USER_SLOT_WORDS];  // read as the SlotHeader's start
  const uint32_t t = threadIdx.x;
  if (first == nullptr) {
    // One round trip for the three words when the slot is in mapped memory.
    if (t < FL_USER_SLOT_WORDS) head[t] = ((const uint4*)fd->slot_dptr)[t];
    if (t < FL_USER_RESULT_WORDS) user->words[t] = 0u;
  }
  __syncthreads();
  if (t != 0) return;
  const uint32_t in_count = fl_frame_samples(fd, in_capacity);
  uint32_t out_count = fixed_out != 0 ? fixed_out : in_count;
  if (out_count > out_capacity) out_count = out_capacity;
  if (first == nullptr) {
    const SlotHeader* s = (const SlotHeader*)head;
    frame->sequence = s->frame_seq;
    frame->sender_ts_ns = s->sender_ts_ns;
    frame->stream_id = s->stream_id;
    frame->flags = s->flags;
  } else {
    frame->sequence = first->sequence;
    frame->sender_ts_ns = first->sender_ts_ns;
    frame->stream_id = first->stream_id;
    frame->flags = first->flags;
  }
  frame->ring_sequence = fd->ring_seq;
  frame->length_bytes = fd->payload_len;
  frame->in_count = in_count;
  frame->out_count = out_count;
  frame->_reserved0 = 0u;
  frame->_reserved[0] = 0ull;
  frame->_reserved[1] = 0ull;
  fd->n_samples = out_count;
}
