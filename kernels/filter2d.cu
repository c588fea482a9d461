// filter2d: 3x3 filter over rows of `width` samples with a zero border; the
// samples after the last whole row pass through (src/ops/cpu.rs `filter2d`).
#include "ops_common.cuh"

// Kernel parameter, passed by value (mirrors Filter2dParams in src/gpu/operators.rs).
struct Filter2dParams {
  uint32_t width;    // >= 1
  float kernel[9];   // row-major, kernel[dr * 3 + dc] weighs x[r + dr - 1][c + dc - 1]
};

// Block: FL_OP_THREADS threads; grid: any size (grid-stride).
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_filter2d(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, Filter2dParams p) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  uint32_t n = fl_frame_samples(fd, capacity);
  uint32_t w = p.width;
  uint32_t rows = w ? n / w : 0;
  uint32_t full = rows * w;
  uint32_t stride = gridDim.x * FL_OP_THREADS;
  for (uint32_t i = blockIdx.x * FL_OP_THREADS + threadIdx.x; i < n; i += stride) {
    if (i >= full) {
      y[i] = x[i];
      continue;
    }
    uint32_t r = i / w, c = i - r * w;
    float acc = 0.0f;
#pragma unroll
    for (uint32_t dr = 0; dr < 3; ++dr) {
      if (r + dr < 1 || r + dr - 1 >= rows) continue;
#pragma unroll
      for (uint32_t dc = 0; dc < 3; ++dc) {
        if (c + dc < 1 || c + dc - 1 >= w) continue;
        acc = fl_mul_add(p.kernel[dr * 3 + dc], x[(r + dr - 1) * w + (c + dc - 1)], acc);
      }
    }
    y[i] = acc;
  }
}
