// filter2d: 3x3 filter over rows of `width` samples with a zero border; the
// samples after the last whole row pass through (src/ops/cpu.rs `filter2d`).
// Shared by the filter2d kernel (filter2d.cu) and the fused chain (fused.cu).
#pragma once
#include "ops_common.cuh"

// The output at row `r`, column `c` of `rows` whole rows of `w` samples:
// the 3x3 sum in a fixed order, the border taken as zero. Sample j is
// x[j - base] (base: the first sample `x` holds).
FL_DEVICE float fl_filter2d_at(const float* x, int64_t base, uint32_t r, uint32_t c, uint32_t rows, uint32_t w,
                               const float* k) {
  float acc = 0.0f;
#pragma unroll
  for (uint32_t dr = 0; dr < 3; ++dr) {
    if (r + dr < 1 || r + dr - 1 >= rows) continue;
#pragma unroll
    for (uint32_t dc = 0; dc < 3; ++dc) {
      if (c + dc < 1 || c + dc - 1 >= w) continue;
      const int64_t src = (int64_t)(r + dr - 1) * w + (c + dc - 1);
      acc = fl_mul_add(k[dr * 3 + dc], x[src - base], acc);
    }
  }
  return acc;
}

// fl_filter2d_at for a pixel with all eight neighbours inside the image:
// the nine terms in the same order, without bounds tests. `above`: the
// neighbour above and to the left; rows are `w` samples apart.
FL_DEVICE float fl_filter2d_interior(const float* above, uint32_t w, const float* k) {
  const float* here = above + w;
  const float* below = here + w;
  float acc = 0.0f;
  acc = fl_mul_add(k[0], above[0], acc);
  acc = fl_mul_add(k[1], above[1], acc);
  acc = fl_mul_add(k[2], above[2], acc);
  acc = fl_mul_add(k[3], here[0], acc);
  acc = fl_mul_add(k[4], here[1], acc);
  acc = fl_mul_add(k[5], here[2], acc);
  acc = fl_mul_add(k[6], below[0], acc);
  acc = fl_mul_add(k[7], below[1], acc);
  acc = fl_mul_add(k[8], below[2], acc);
  return acc;
}

// Worker `worker` of `workers` takes every workers-th output. `k`: the 3x3
// kernel row-major, k[dr * 3 + dc] weighs x[r + dr - 1][c + dc - 1].
FL_DEVICE void fl_filter2d_range(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, uint32_t w,
                                 const float* k, uint64_t worker, uint64_t workers) {
  uint32_t n = fl_frame_samples(fd, capacity);
  uint32_t rows = w ? n / w : 0;
  uint32_t full = rows * w;
  for (uint64_t j = worker; j < n; j += workers) {
    uint32_t i = (uint32_t)j;
    if (i >= full) {
      y[i] = x[i];
      continue;
    }
    uint32_t r = i / w;
    y[i] = fl_filter2d_at(x, 0, r, i - r * w, rows, w, k);
  }
}
