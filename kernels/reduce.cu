// stats and threshold: one block reduces the whole frame into ChainResult
// (src/ops/cpu.rs `stats` and `threshold`); the samples pass through
// untouched. fl_stats_threshold does both in one pass when the chain has them
// next to each other. No atomics and no memset: the block writes every field
// it owns.
#include "ops_common.cuh"

struct FlPartial {
  double sum;
  float min, max;
  uint32_t count, first;  // first: index of the first sample above the level, or ~0u
};

FL_DEVICE void fl_combine(FlPartial& a, const FlPartial& b) {
  a.sum += b.sum;
  a.min = fminf(a.min, b.min);
  a.max = fmaxf(a.max, b.max);
  a.count += b.count;
  a.first = b.first < a.first ? b.first : a.first;
}

template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_take(FlPartial& p, float v, uint32_t i, float level) {
  if (STATS) {
    p.sum += (double)v;
    p.min = fminf(p.min, v);  // like f32::min, a NaN sample never wins
    p.max = fmaxf(p.max, v);
  }
  if (THRESHOLD && v > level) {
    if (p.count == 0) p.first = i;  // each thread visits its indices in increasing order
    p.count += 1;
  }
}

FL_DEVICE FlPartial fl_shuffle_down(const FlPartial& p, int d) {
  FlPartial o;
  o.sum = __shfl_down_sync(0xffffffffu, p.sum, d);
  o.min = __shfl_down_sync(0xffffffffu, p.min, d);
  o.max = __shfl_down_sync(0xffffffffu, p.max, d);
  o.count = __shfl_down_sync(0xffffffffu, p.count, d);
  o.first = __shfl_down_sync(0xffffffffu, p.first, d);
  return o;
}

// Block: FL_REDUCE_THREADS threads, grid: one block.
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_reduce(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out, float level,
                         const LoopParams* publish) {
  __shared__ FlPartial warp_part[FL_REDUCE_THREADS / 32];
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  uint32_t n = fl_frame_samples(fd, capacity);
  FlPartial p = {0.0, fl_pos_inf(), fl_neg_inf(), 0u, ~0u};
  bool vec = ((uint64_t)x % 16) == 0;
  for (uint32_t i = threadIdx.x * 4; i < n; i += FL_REDUCE_THREADS * 4) {
    if (vec && i + 4 <= n) {
      float4 v = *(const float4*)(x + i);
      fl_take<STATS, THRESHOLD>(p, v.x, i, level);
      fl_take<STATS, THRESHOLD>(p, v.y, i + 1, level);
      fl_take<STATS, THRESHOLD>(p, v.z, i + 2, level);
      fl_take<STATS, THRESHOLD>(p, v.w, i + 3, level);
    } else {
      for (uint32_t j = i; j < i + 4 && j < n; ++j) fl_take<STATS, THRESHOLD>(p, x[j], j, level);
    }
  }
  for (int d = 16; d > 0; d /= 2) fl_combine(p, fl_shuffle_down(p, d));
  uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) warp_part[warp] = p;
  __syncthreads();
  if (warp != 0) return;
  p = lane < FL_REDUCE_THREADS / 32 ? warp_part[lane] : FlPartial{0.0, fl_pos_inf(), fl_neg_inf(), 0u, ~0u};
  for (int d = 16; d > 0; d /= 2) fl_combine(p, fl_shuffle_down(p, d));
  if (lane != 0) return;
  if (STATS) {
    bool empty = n == 0;
    out->sum = empty ? 0.0f : (float)p.sum;
    out->min = empty ? 0.0f : p.min;
    out->max = empty ? 0.0f : p.max;
    out->mean = empty ? 0.0f : (float)(p.sum / (double)n);
  }
  if (THRESHOLD) {
    out->detect_count = p.count;
    out->first_detect_index = p.count ? (int32_t)p.first : -1;
  }
  // The chain's last kernel publishes the result itself (no end-marker node).
  if (publish != nullptr) fl_publish_result(*publish);
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
