// Example data-ready handler for a sensor bridge whose DMA engine writes each
// frame straight into the ring, slot after slot (Holoscan Sensor Bridge
// style), and no host thread publishes anything. After the payload the
// engine writes the slot's metadata, big-endian:
//
//   word 0: frame counter, 1, 2, 3, ... (0: the slot was never written); written last
//   word 1: payload bytes
//   word 2: status, bit 0 set when the engine dropped part of the frame
//
// The handler reports a slot when its counter is newer than the last one it
// reported, so it resynchronises by itself after frames were overwritten.
// A user handler has the fl_handler_fn signature of frameloop.cuh. Name it in
// the config with [handler] source = "handlers/hsb_ready.cu", entry =
// "hsb_ready"; `frameloop send --format hsb` emulates the sensor
// (docs/operators.md).
#include "frameloop.cuh"

#define HSB_META_COUNTER 0u
#define HSB_META_LENGTH 1u
#define HSB_META_STATUS 2u
#define HSB_STATUS_TRUNCATED 1u

// state->words[0]: the last counter reported (0 before the first frame);
// state->words[1]: the counter's wraps, so that frame sequence numbers keep increasing.
__device__ uint32_t hsb_ready(const fl_slot* slot, fl_handler_state* state, fl_frame* frame) {
  // Acquire: the payload and the other words were written before the counter.
  const uint32_t counter = fl_be32(fl_meta_word(slot, HSB_META_COUNTER));
  const uint32_t last = (uint32_t)state->words[0];
  if (counter == 0 || counter == last) return 0;
  // Serial-number comparison: an older counter is a slot not yet rewritten.
  if (last != 0 && (int32_t)(counter - last) < 0) return 0;
  if (counter < last) state->words[1] += 1;
  state->words[0] = counter;
  frame->sequence = (state->words[1] << 32) | counter;
  frame->stream_id = 0;
  frame->length_bytes = fl_be32(fl_meta_word(slot, HSB_META_LENGTH));
  const uint32_t status = fl_be32(fl_meta_word(slot, HSB_META_STATUS));
  frame->flags = (status & HSB_STATUS_TRUNCATED) ? FL_FRAME_INCOMPLETE : FL_FRAME_COMPLETE;
  return 1;
}
