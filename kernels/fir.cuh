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

// The same FIR without tiles, for input in shared memory: worker `worker` of
// `workers` computes every workers-th output straight from `x`. Same sums in
// the same order as fl_fir_tiles.
FL_DEVICE void fl_fir_direct(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, uint32_t count,
                             const float* taps, uint32_t worker, uint32_t workers) {
  const int64_t n = fl_frame_samples(fd, capacity);
  count = count <= FL_MAX_FIR_TAPS ? count : FL_MAX_FIR_TAPS;
  const int64_t half = count / 2;
  for (int64_t i = worker; i < n; i += workers) {
    float acc = 0.0f;
#pragma unroll 4
    for (uint32_t k = 0; k < count; ++k) {
      const int64_t src = i + k - half;
      acc = fl_mul_add(taps[k], (src >= 0 && src < n) ? x[src] : 0.0f, acc);
    }
    y[i] = acc;
  }
}
