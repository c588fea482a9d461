// stats and threshold: the frame's samples reduced into ChainResult
// (src/ops/cpu.rs `stats` and `threshold`); the samples pass through
// untouched. Both in one pass when the chain has them next to each other.
//
// Two shapes share the same per-thread and per-block steps, so their results
// agree bit for bit on a frame one block reduces:
// - fl_reduce_block: one block reads the whole frame (the fused chain, and
//   small frames, where a second pass would cost more than it saves);
// - fl_reduce_grid: up to gridDim.x blocks each reduce a grid-stride share
//   into their slot of FlReduceScratch; the last block to take a ticket
//   combines the slots in block-index order and writes the result.
// Every step has a fixed order (each thread's samples in increasing index,
// then a fixed shuffle tree, then slots by block index), so the same frame
// gives the same bits on every run; the sum is kept in f64 throughout.
#pragma once
#include "ops_common.cuh"

// Samples a block of the grid reduction takes at least: one float4 per
// thread. A frame of n samples is spread over ceil(n / this) blocks at most.
#define FL_REDUCE_BLOCK_SAMPLES (FL_REDUCE_THREADS * 4)
// Frames of at most this many samples are reduced by one block even when the
// grid has more: one SM reads 32 Ki samples (128 KiB) in about the time the
// grid reduction spends on its extra steps (partials written, fenced and
// counted, then read back by the last block: two more trips through L2 and
// a dependent atomic), so below it more blocks only add latency.
#define FL_REDUCE_ONE_BLOCK_SAMPLES 32768u
// Most blocks of a grid reduction: the last block combines one slot per
// thread, so at most FL_REDUCE_THREADS.
#define FL_REDUCE_MAX_BLOCKS 1024u

struct FlPartial {
  double sum;
  float min, max;
  uint32_t count, first;  // first: index of the first sample above the level, or ~0u
};

// Device memory of one grid reduction, allocated zeroed when the graph is
// built (src/gpu/operators/reduce.rs, ReduceOp's `scratch` port) and kept between
// frames. Invariant: `ticket` is 0 whenever no reduction is running; the
// last block of each frame puts it back to 0.
struct FlReduceScratch {
  uint32_t ticket;  // blocks of the running frame that have written their slot
  uint32_t _pad[3];
  FlPartial partial[FL_REDUCE_MAX_BLOCKS];  // slot b: block b's partial
};

FL_DEVICE FlPartial fl_partial_empty() { return FlPartial{0.0, fl_pos_inf(), fl_neg_inf(), 0u, ~0u}; }

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

// This thread's share of samples [0, n): groups of four from 4 * (part *
// FL_REDUCE_THREADS + threadIdx.x), every 4 * parts * FL_REDUCE_THREADS
// samples (part: this block's index among `parts` reducing blocks).
template <bool STATS, bool THRESHOLD>
FL_DEVICE FlPartial fl_accumulate(const float* x, uint32_t n, uint32_t part, uint32_t parts, float level) {
  FlPartial p = fl_partial_empty();
  const bool vec = ((uint64_t)x % 16) == 0;
  const uint64_t stride = 4ull * parts * FL_REDUCE_THREADS;
  for (uint64_t i = 4ull * ((uint64_t)part * FL_REDUCE_THREADS + threadIdx.x); i < n; i += stride) {
    const uint32_t k = (uint32_t)i;
    if (vec && i + 4 <= n) {
      float4 v = *(const float4*)(x + k);
      fl_take<STATS, THRESHOLD>(p, v.x, k, level);
      fl_take<STATS, THRESHOLD>(p, v.y, k + 1, level);
      fl_take<STATS, THRESHOLD>(p, v.z, k + 2, level);
      fl_take<STATS, THRESHOLD>(p, v.w, k + 3, level);
    } else {
      for (uint32_t j = k; j < k + 4 && j < n; ++j) fl_take<STATS, THRESHOLD>(p, x[j], j, level);
    }
  }
  return p;
}

// The partials of the block's first `warps` warps (1 to 32; the other
// threads' are ignored) combined by a fixed tree: each warp by shuffle, then
// warp 0 over the warps, in as few levels as `warps` needs (the levels it
// leaves out would only add empty partials, so the bits are those of the
// full tree over the same partials). Thread 0 returns the total, other
// threads something meaningless. Warps with nothing to add take none of
// the shuffles (six per level and warp). Block: FL_REDUCE_THREADS threads,
// all of which must call it; it may be called again once it returned.
FL_DEVICE FlPartial fl_block_combine_warps(FlPartial p, uint32_t warps) {
  __shared__ FlPartial warp_part[FL_REDUCE_THREADS / 32];
  const uint32_t warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp < warps) {
    for (int d = 16; d > 0; d /= 2) fl_combine(p, fl_shuffle_down(p, d));
    if (lane == 0) warp_part[warp] = p;
  }
  __syncthreads();
  if (warp == 0) {
    p = lane < warps ? warp_part[lane] : fl_partial_empty();
    int top = 1;
    while (top < (int)warps) top *= 2;
    for (int d = top / 2; d > 0; d /= 2) fl_combine(p, fl_shuffle_down(p, d));
  }
  // warp_part may be reused by the next call only after warp 0 read it.
  __syncthreads();
  return p;
}

// Every thread's partial combined (fl_block_combine_warps over all warps).
FL_DEVICE FlPartial fl_block_combine(FlPartial p) { return fl_block_combine_warps(p, FL_REDUCE_THREADS / 32); }

// The frame's total into `out` (one thread): an empty frame's stats are 0.
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_write_result(ChainResult* out, const FlPartial& p, uint32_t n) {
  if (STATS) {
    const bool empty = n == 0;
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

// One block reduces the whole frame. Block: FL_REDUCE_THREADS threads; every
// thread must call it and every thread returns (thread 0 has written `out`
// when it does).
template <bool STATS, bool THRESHOLD>
FL_DEVICE void fl_reduce_block(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out,
                               float level) {
  const uint32_t n = fl_frame_samples(fd, capacity);
  const FlPartial p = fl_block_combine(fl_accumulate<STATS, THRESHOLD>(x, n, 0, 1, level));
  if (threadIdx.x == 0) fl_write_result<STATS, THRESHOLD>(out, p, n);
}

// Blocks that reduce a frame of n samples on a grid of `grid` blocks.
FL_DEVICE uint32_t fl_reduce_parts(uint32_t n, uint32_t grid) {
  if (n <= FL_REDUCE_ONE_BLOCK_SAMPLES) return 1;
  uint32_t want = n / FL_REDUCE_BLOCK_SAMPLES + (n % FL_REDUCE_BLOCK_SAMPLES != 0);
  want = want < grid ? want : grid;
  return want < FL_REDUCE_MAX_BLOCKS ? want : FL_REDUCE_MAX_BLOCKS;
}

// A slot written by another block, read past this SM's L1.
FL_DEVICE FlPartial fl_load_partial(const FlPartial* slot) {
  FlPartial p;
  p.sum = __ldcg(&slot->sum);
  p.min = __ldcg(&slot->min);
  p.max = __ldcg(&slot->max);
  p.count = __ldcg(&slot->count);
  p.first = __ldcg(&slot->first);
  return p;
}

// The frame reduced by fl_reduce_parts() blocks of the grid (blocks past
// them return at once). Returns true in the one thread that wrote `out`
// (thread 0 of the last block), after the result and the ticket's reset.
// With one part, block 0 reduces alone and `scratch` is not touched (it may
// then be null). Every block must call it with the same arguments.
template <bool STATS, bool THRESHOLD>
FL_DEVICE bool fl_reduce_grid(const FrameDesc* fd, const float* x, uint32_t capacity, ChainResult* out,
                              float level, FlReduceScratch* scratch) {
  const uint32_t n = fl_frame_samples(fd, capacity);
  const uint32_t parts = fl_reduce_parts(n, gridDim.x);
  if (blockIdx.x >= parts) return false;  // the whole block: no barrier is left waiting
  FlPartial p = fl_block_combine(fl_accumulate<STATS, THRESHOLD>(x, n, blockIdx.x, parts, level));
  if (parts == 1) {
    if (threadIdx.x == 0) fl_write_result<STATS, THRESHOLD>(out, p, n);
    return threadIdx.x == 0;
  }
  __shared__ bool last;
  if (threadIdx.x == 0) {
    __stcg(&scratch->partial[blockIdx.x].sum, p.sum);
    __stcg(&scratch->partial[blockIdx.x].min, p.min);
    __stcg(&scratch->partial[blockIdx.x].max, p.max);
    __stcg(&scratch->partial[blockIdx.x].count, p.count);
    __stcg(&scratch->partial[blockIdx.x].first, p.first);
    last = fl_take_ticket(&scratch->ticket) == parts - 1;
  }
  // Thread 0's acquire, then the barrier: every counted slot is visible to this block's reads below.
  __syncthreads();
  if (!last) return false;
  // parts <= FL_REDUCE_MAX_BLOCKS == FL_REDUCE_THREADS: one slot per thread, combined by the fixed tree.
  p = threadIdx.x < parts ? fl_load_partial(&scratch->partial[threadIdx.x]) : fl_partial_empty();
  p = fl_block_combine(p);
  if (threadIdx.x != 0) return false;
  fl_write_result<STATS, THRESHOLD>(out, p, n);
  scratch->ticket = 0;  // ready for the next frame: every block of this one has counted
  return true;
}

// The layout src/gpu/operators/reduce.rs sizes the scratch port by (REDUCE_SCRATCH_BYTES).
static_assert(sizeof(FlPartial) == 24, "FlPartial");
static_assert(sizeof(FlReduceScratch) == 16 + 24 * FL_REDUCE_MAX_BLOCKS, "FlReduceScratch");
static_assert(FL_REDUCE_MAX_BLOCKS <= FL_REDUCE_THREADS, "the last block combines one slot per thread");
