// filter2d kernel: the 3x3 filter of filter2d.cuh over the whole grid.
#include "filter2d.cuh"

// Kernel parameter, passed by value (mirrors Filter2dParams in src/gpu/operators/filter2d.rs).
struct Filter2dParams {
  uint32_t width;    // >= 1
  float kernel[9];   // row-major, kernel[dr * 3 + dc] weighs x[r + dr - 1][c + dc - 1]
};

// Block: FL_OP_THREADS threads; grid: any size (grid-stride).
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_filter2d(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, Filter2dParams p,
                uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  // The kernel of the frame's parameter bank (fl_live_step), else the
  // argument's; into the argument itself, so that it stays in registers
  // (a selected pointer would move it to local memory).
  if (const FusedStep* live = fl_live_step(fd, param_step)) {
#pragma unroll
    for (int i = 0; i < 9; ++i) p.kernel[i] = live->coeffs[i];
  }
  fl_filter2d_range(fd, x, y, capacity, p.width, p.kernel, fl_grid_thread(), fl_grid_threads());
}
