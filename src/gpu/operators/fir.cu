// fir kernel: the FIR of fir.cuh over the whole grid.
#include "fir.cuh"

// Kernel parameter, passed by value (mirrors FirParams in src/gpu/operators/fir.rs).
struct FirParams {
  uint32_t count;  // odd, 1..=FL_MAX_FIR_TAPS
  float taps[FL_MAX_FIR_TAPS];
};

// Block: FL_OP_THREADS threads; grid: any size (grid-stride over tiles of
// FL_OP_THREADS outputs). `capacity`: floats that `x` and `y` hold;
// `param_step`: where the frame's parameter bank holds the taps (fl_live_step).
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_fir(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, FirParams p, uint32_t param_step) {
  __shared__ float tile[FL_OP_THREADS + FL_MAX_FIR_TAPS - 1];
  __shared__ float taps[FL_MAX_FIR_TAPS];
  // Constant indices only: a parameter array indexed at run time would be
  // copied to local memory first.
#pragma unroll
  for (uint32_t k = 0; k < FL_MAX_FIR_TAPS; ++k)
    if (threadIdx.x == k % FL_OP_THREADS) taps[k] = p.taps[k];
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  // The taps of the frame's parameter bank, if the loop has banks (same count).
  if (const FusedStep* live = fl_live_step(fd, param_step))
    for (uint32_t k = threadIdx.x; k < FL_MAX_FIR_TAPS; k += FL_OP_THREADS) taps[k] = live->coeffs[k];
  __syncthreads();
  fl_fir_tiles<FL_OP_THREADS>(fd, x, y, capacity, p.count, taps, blockIdx.x, gridDim.x, tile);
}
