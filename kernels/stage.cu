// stage: copies the claimed frame's payload from the mapped ring slot into a
// device buffer and points the FrameDesc at the copy, so the operators after
// it read device memory: the "one copy" alternative to zero-copy reads of
// the slot, kept for the comparison of the two.
#include "ops_common.cuh"

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
