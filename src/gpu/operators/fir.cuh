// fir: centred FIR with zero padding, y[i] = sum_k taps[k] * x[i + k - K/2]
// (src/ops/cpu.rs `fir`), summed in tap order like the CPU. Shared by the
// FIR kernel (fir.cu) and the fused chain (fused.cu).
#pragma once
#include "ops_common.cuh"

// Block `block` of `blocks`, THREADS threads each, takes tiles of THREADS
// outputs in turn. `taps`: the block's shared copy of the `count` taps;
// `tile`: its shared scratch of THREADS + FL_MAX_FIR_TAPS - 1 floats. Every
// thread of the block must call it (it synchronises the block). `capacity`:
// floats that `x` and `y` hold. The tap loop runs `count` times, not
// FL_MAX_FIR_TAPS: a predicated loop over every possible tap cost a
// 5-tap filter as much as a 63-tap one.
template <uint32_t THREADS>
FL_DEVICE void fl_fir_tiles(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, uint32_t count,
                            const float* taps, uint32_t block, uint32_t blocks, float* tile) {
  uint32_t n = fl_frame_samples(fd, capacity);
  count = count <= FL_MAX_FIR_TAPS ? count : FL_MAX_FIR_TAPS;
  uint32_t half = count / 2;
  for (uint64_t base = (uint64_t)block * THREADS; base < n; base += (uint64_t)blocks * THREADS) {
    for (uint32_t j = threadIdx.x; j < THREADS + 2 * half; j += THREADS) {
      int64_t src = (int64_t)base + j - half;
      tile[j] = (src >= 0 && src < (int64_t)n) ? x[src] : 0.0f;
    }
    __syncthreads();
    uint64_t i = base + threadIdx.x;
    if (i < n) {
      // Zero padding contributes +0 products, which leave the CPU's sum unchanged.
      const float* window = tile + threadIdx.x;
      float acc = 0.0f;
#pragma unroll 4
      for (uint32_t k = 0; k < count; ++k) acc = fl_mul_add(taps[k], window[k], acc);
      y[i] = acc;
    }
    __syncthreads();
  }
}

// Output `i` of the FIR straight from `x` (`n` samples, zero outside; `x`
// holds sample `base` at x[0], so a tile passes its first sample's index):
// the same sum in the same order as fl_fir_tiles.
FL_DEVICE float fl_fir_at(const float* x, int64_t base, int64_t n, uint32_t count, const float* taps, int64_t i) {
  const int64_t half = count / 2;
  float acc = 0.0f;
#pragma unroll 4
  for (uint32_t k = 0; k < count; ++k) {
    const int64_t src = i + k - half;
    acc = fl_mul_add(taps[k], (src >= 0 && src < n) ? x[src - base] : 0.0f, acc);
  }
  return acc;
}

// The same FIR without tiles, for input in shared memory: worker `worker` of
// `workers` computes every workers-th output straight from `x`.
FL_DEVICE void fl_fir_direct(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, uint32_t count,
                             const float* taps, uint32_t worker, uint32_t workers) {
  const int64_t n = fl_frame_samples(fd, capacity);
  count = count <= FL_MAX_FIR_TAPS ? count : FL_MAX_FIR_TAPS;
  for (int64_t i = worker; i < n; i += workers) y[i] = fl_fir_at(x, 0, n, count, taps, i);
}

// Longest filter fl_fir_quads takes (its window is three float4s).
#define FL_FIR_QUAD_MAX_TAPS 9

// One quad of fl_fir_quads (and of the tiled kernel's FIR, fused_tiled.cu)
// for a filter of 2 * HALF + 1 taps: the window indices are compile-time
// constants, so `v` stays in registers.
template <uint32_t HALF>
FL_DEVICE float4 fl_fir_quad(const float* v, const float* t) {
  float out[4];
#pragma unroll
  for (uint32_t m = 0; m < 4; ++m) {
    float acc = 0.0f;
#pragma unroll
    for (uint32_t k = 0; k < 2 * HALF + 1; ++k) acc = fl_mul_add(t[k], v[4 + m + k - HALF], acc);
    out[m] = acc;
  }
  return make_float4(out[0], out[1], out[2], out[3]);
}

// The same FIR for input in shared memory, four outputs per thread from a
// window of three float4 loads: thread `worker` of `workers` computes
// outputs 4q..4q+3 for q = worker, worker + workers, ... . Needs x and y
// 16-byte aligned and an odd count <= FL_FIR_QUAD_MAX_TAPS; the samples past
// the last whole quad get fl_fir_at. Same sums in the same
// order as fl_fir_tiles.
FL_DEVICE void fl_fir_quads(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, uint32_t count,
                            const float* taps, uint32_t worker, uint32_t workers) {
  const uint32_t n = fl_frame_samples(fd, capacity);
  const uint32_t half = count / 2;
  const uint32_t quads = n / 4;
  float t[FL_FIR_QUAD_MAX_TAPS];
#pragma unroll
  for (uint32_t k = 0; k < FL_FIR_QUAD_MAX_TAPS; ++k) t[k] = k < count ? taps[k] : 0.0f;
  const float4* x4 = (const float4*)x;
  for (uint32_t q = worker; q < quads; q += workers) {
    // v[j] = x[4q - 4 + j], zero outside 0..n-1.
    const float4 a = q > 0 ? x4[q - 1] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    const float4 b = x4[q];
    float4 c = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (q + 1 < quads) {
      c = x4[q + 1];
    } else {
      const uint32_t base = 4 * q + 4;  // at most three samples follow the last quad
      c.x = base < n ? x[base] : 0.0f;
      c.y = base + 1 < n ? x[base + 1] : 0.0f;
      c.z = base + 2 < n ? x[base + 2] : 0.0f;
    }
    const float v[12] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w, c.x, c.y, c.z, c.w};
    float4 r;
    switch (half) {
      case 0: r = fl_fir_quad<0>(v, t); break;
      case 1: r = fl_fir_quad<1>(v, t); break;
      case 2: r = fl_fir_quad<2>(v, t); break;
      case 3: r = fl_fir_quad<3>(v, t); break;
      default: r = fl_fir_quad<4>(v, t); break;
    }
    *(float4*)(y + 4 * q) = r;
  }
  // The samples after the last whole quad.
  for (uint32_t i = 4 * quads + worker; i < n; i += workers) y[i] = fl_fir_at(x, 0, n, count, taps, i);
}
