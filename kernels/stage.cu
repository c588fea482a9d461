// stage: copies the claimed frame's payload from the mapped ring slot into a
// device buffer and points the FrameDesc at the copy, so the operators after
// it read device memory: the "one copy" alternative to zero-copy reads of
// the slot, kept for the comparison of the two.
#include "ops_common.cuh"
#include "stream.cuh"

#define FL_STAGE_THREADS 1024

// Block: FL_STAGE_THREADS threads; grid: one block (every thread reads the
// old payload address before thread 0 replaces it). `dst` holds
// `capacity_words` 16-byte words; the payload's last word may take up to 15
// bytes past its end, which stay inside the slot (slots are 256-byte aligned).
extern "C" __global__ void __launch_bounds__(FL_STAGE_THREADS)
    fl_stage_payload(FrameDesc* fd, uint4* dst, uint32_t capacity_words) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  const uint4* src = (const uint4*)fd->payload_dptr;
  uint32_t words = (fd->payload_len + 15u) / 16u;
  if (words > capacity_words) words = capacity_words;
  fl_copy_words(src, dst, words, threadIdx.x, FL_STAGE_THREADS);
  __syncthreads();
  if (threadIdx.x == 0) fd->payload_dptr = (uint64_t)dst;
}

// Sub-frame streaming (src/gpu/streaming.rs): while the loop waits for the
// next frame, fl_stream_pull copies the part of it the UDP reassembler
// reports final (the slot header's received_mark: a run of packets from
// index 0) into a device staging buffer; when the frame is claimed,
// fl_stream_tail copies only what is left and points the FrameDesc at the
// staging buffer, so the chain reads device memory.

#define FL_STREAM_THREADS 1024

// Grid: any number of blocks of FL_STREAM_THREADS. Runs in the loop body
// in front of the data-ready handler, so the frame it pulls (the one after
// the last claimed) is not claimed while it runs. Each block reads the mark
// itself; word i of the frame is copied by global thread i modulo the
// grid's threads (fl_copy_words), whatever end its block saw, so every word
// below the smallest end any block saw is copied, and that end becomes
// `pulled` (the last block to finish writes it). Bytes under the mark never
// change until the slot is reused, which needs this frame consumed first.
extern "C" __global__ void __launch_bounds__(FL_STREAM_THREADS)
    fl_stream_pull(LoopParams p, FlStreamState* s, uint4* dst, uint32_t capacity_words) {
  __shared__ FlPullRange r;
  if (threadIdx.x == 0) r = fl_next_pull(p, s, capacity_words);
  __syncthreads();
  const uint64_t end = (uint64_t)r.end * 16u;
  if (r.end > r.from) {
    const uint4* src = (const uint4*)(r.slot + FL_SLOT_PAYLOAD_OFFSET);
    fl_copy_words(src + r.from, dst + r.from, r.end - r.from, blockIdx.x * blockDim.x + threadIdx.x,
                  gridDim.x * blockDim.x);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicMax(&s->pending_not, ~end);
    // This block's copies and end before its count; every block's before the length.
    if (fl_take_ticket(&s->ticket) == gridDim.x - 1) {
      s->pulled = ~atomicExch(&s->pending_not, 0ull);
      s->seq = r.seq;
      s->ticket = 0;
      // The handler that follows polls until this frame has new words (or a frame is ready).
      const FlPollWatch w = fl_pull_watch(p, s, capacity_words);
      p.st->pull_watch_above = w.above;
      p.st->pull_watch_mark = w.mark;
    }
  }
}

// Grid: any number of blocks of FL_STREAM_THREADS; the first node of the
// frame's work. Copies what fl_stream_pull has not of the claimed frame
// (all of it when the staging buffer holds another frame) from the slot,
// and points the FrameDesc at the staging buffer. The payload's last word
// may take up to 15 bytes past its end, which stay inside the slot.
extern "C" __global__ void __launch_bounds__(FL_STREAM_THREADS)
    fl_stream_tail(FrameDesc* fd, const FlStreamState* s, uint4* dst, uint32_t capacity_words) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  const uint32_t from = s->seq == fd->ring_seq ? (uint32_t)(s->pulled / 16u) : 0u;
  uint32_t words = (fd->payload_len + 15u) / 16u;
  if (words > capacity_words) words = capacity_words;
  if (words > from) {
    const uint4* src = (const uint4*)(fd->slot_dptr + FL_SLOT_PAYLOAD_OFFSET);
    fl_copy_words(src + from, dst + from, words - from, blockIdx.x * blockDim.x + threadIdx.x,
                  gridDim.x * blockDim.x);
  }
  if (blockIdx.x == 0 && threadIdx.x == 0) fd->payload_dptr = (uint64_t)dst;
}
