// stats and threshold kernels: the block reduction of reduce.cuh, on one block.
#include "reduce.cuh"

// One block of FL_REDUCE_THREADS. The chain's last kernel publishes the
// result itself (no end-marker node) when `publish` is not null.
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_reduce(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                         const LoopParams* publish) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  fl_reduce_block<STATS, THRESHOLD>(fd, x, capacity, out, level);
  if (publish != nullptr && threadIdx.x == 0) fl_publish_result(*publish);
}

// `publish`: null, or the loop's parameters when this kernel ends the chain
// and publishes the frame's result (`out` is then the loop's ChainResult).
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_stats(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, const LoopParams* publish) {
  fl_reduce<true, false>(fd, x, capacity, out, 0.0f, publish);
}
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_threshold(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                 const LoopParams* publish) {
  fl_reduce<false, true>(fd, x, capacity, out, level, publish);
}
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_stats_threshold(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                       const LoopParams* publish) {
  fl_reduce<true, true>(fd, x, capacity, out, level, publish);
}
