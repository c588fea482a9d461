// stats and threshold kernels: the grid reduction of reduce.cuh.
#include "reduce.cuh"

// Blocks of FL_REDUCE_THREADS; a grid of one never touches `scratch`. The
// chain's last kernel publishes the result itself (no end-marker node) when
// `publish` is not null: the block that combined the frame does, after
// writing it.
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_reduce(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                         FlReduceScratch* scratch, const LoopParams* publish, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  if (THRESHOLD)
    if (const FusedStep* live = fl_live_step(fd, param_step)) level = live->a;
  const bool wrote = fl_reduce_grid<STATS, THRESHOLD>(fd, x, capacity, out, level, scratch);
  if (wrote && publish != nullptr) fl_publish_result(*publish);
}

// `scratch`: the operator's FlReduceScratch (zeroed when allocated), or null
// for a grid of one block. `publish`: null, or the loop's parameters when
// this kernel ends the chain and publishes the frame's result (`out` is then
// the loop's ChainResult). `param_step`: where the frame's parameter bank
// holds the threshold level (fl_live_step).
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_stats(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, FlReduceScratch* scratch,
             const LoopParams* publish) {
  fl_reduce<true, false>(fd, x, capacity, out, 0.0f, scratch, publish, FL_NO_PARAM_STEP);
}
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_threshold(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                 FlReduceScratch* scratch, const LoopParams* publish, uint32_t param_step) {
  fl_reduce<false, true>(fd, x, capacity, out, level, scratch, publish, param_step);
}
extern "C" __global__ void __launch_bounds__(FL_REDUCE_THREADS)
    fl_stats_threshold(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                       FlReduceScratch* scratch, const LoopParams* publish, uint32_t param_step) {
  fl_reduce<true, true>(fd, x, capacity, out, level, scratch, publish, param_step);
}
