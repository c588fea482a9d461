// user_frame: how the appliance fills a user kernel's fl_frame (the
// `frame` argument of kernels/frameloop.cuh) for one frame, shared by the
// stand-alone prologue kernel (kernels/user_support.cu) and by the entry
// kernel the appliance wraps around a user kernel (gpu::user::kernel).
#pragma once
#include "ops_common.cuh"
#include "frameloop.cuh"

static_assert(FL_USER_RESULT_WORDS == FL_RESULT_USER_WORDS, "fl_user_result is the record's user words");
// The loop state keeps the request right after the words (DeviceLoopState::actuate_request).
static_assert(sizeof(fl_user_result) == FL_RESULT_USER_WORDS * 4 + 4, "fl_user_result: the words, then the request");

// Fills *frame for this frame (one thread). slot: the loop state's copy of
// the claimed slot's header (device memory, filled by the handler), read by
// the chain's first user kernel (first == nullptr); first: that kernel's
// fl_frame, already filled, for the others. in_capacity / out_capacity: floats the operator's input
// and output buffers hold; fixed_out: output samples per frame (`output = {
// samples = N }`), 0 for `output = "same"`. The counts are clamped to the
// buffers, so a correct kernel never touches memory outside its ports.
FL_DEVICE void fl_user_fill_frame(fl_frame* frame, const FrameDesc* fd, const SlotHeader* slot, const fl_frame* first,
                                  uint32_t in_capacity, uint32_t out_capacity, uint32_t fixed_out) {
  const uint32_t in_count = fl_frame_samples(fd, in_capacity);
  uint32_t out_count = fixed_out != 0 ? fixed_out : in_count;
  if (out_count > out_capacity) out_count = out_capacity;
  if (first == nullptr) {
    const SlotHeader* s = slot;
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
}
