// fir: centred FIR with zero padding, y[i] = sum_k taps[k] * x[i + k - K/2]
// (src/ops/cpu.rs `fir`), summed in tap order like the CPU.
#include "ops_common.cuh"

// Kernel parameter, passed by value (mirrors FirParams in src/gpu/operators.rs).
struct FirParams {
  uint32_t count;  // odd, 1..=FL_MAX_FIR_TAPS
  float taps[FL_MAX_FIR_TAPS];
};

// Block: FL_OP_THREADS threads; grid: any size (grid-stride over tiles of
// FL_OP_THREADS outputs). `capacity`: floats that `x` and `y` hold.
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_fir(const FrameDesc* fd, const float* x, float* y, uint32_t capacity, FirParams p) {
  __shared__ float tile[FL_OP_THREADS + FL_MAX_FIR_TAPS - 1];
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  uint32_t n = fl_frame_samples(fd, capacity);
  uint32_t count = p.count <= FL_MAX_FIR_TAPS ? p.count : FL_MAX_FIR_TAPS;
  uint32_t half = count / 2;
  for (uint64_t base = (uint64_t)blockIdx.x * FL_OP_THREADS; base < n; base += (uint64_t)gridDim.x * FL_OP_THREADS) {
    for (uint32_t j = threadIdx.x; j < FL_OP_THREADS + 2 * half; j += FL_OP_THREADS) {
      int64_t src = (int64_t)base + j - half;
      tile[j] = (src >= 0 && src < (int64_t)n) ? x[src] : 0.0f;
    }
    __syncthreads();
    uint64_t i = base + threadIdx.x;
    if (i < n) {
      // Zero padding contributes +0 products, which leave the CPU's sum unchanged.
      float acc = 0.0f;
#pragma unroll
      for (uint32_t k = 0; k < FL_MAX_FIR_TAPS; ++k)
        if (k < count) acc = fl_mul_add(p.taps[k], tile[threadIdx.x + k], acc);
      y[i] = acc;
    }
    __syncthreads();
  }
}
