// stats and threshold: one block reduces the whole frame into ChainResult
// (src/ops/cpu.rs `stats` and `threshold`); the samples pass through
// untouched. Both in one pass when the chain has them next to each other. No
// atomics and no memset: the block writes every field it owns. Shared by the
// reduction kernels (reduce.cu) and the fused chain (fused.cu).
#pragma once
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

// Block: FL_REDUCE_THREADS threads; every thread must call it and every
// thread returns (thread 0 has written `out` when it does).
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_reduce_block(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out,
                               float level) {
  __shared__ FlPartial warp_part[FL_REDUCE_THREADS / 32];
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
  if (warp == 0) {
    p = lane < FL_REDUCE_THREADS / 32 ? warp_part[lane] : FlPartial{0.0, fl_pos_inf(), fl_neg_inf(), 0u, ~0u};
    for (int d = 16; d > 0; d /= 2) fl_combine(p, fl_shuffle_down(p, d));
    if (lane == 0) {
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
    }
  }
  // warp_part may be reused by the next call only after warp 0 read it.
  __syncthreads();
}
