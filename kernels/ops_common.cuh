// frameloop operator kernels: what every kernel in kernels/ shares. The
// operators' meaning is defined by src/ops/cpu.rs; the kernels reproduce it
// bit for bit where the CPU computes in f32 (no fused multiply-add: products
// and sums use __fmul_rn/__fadd_rn in the CPU's order), and to f64 rounding
// for the stats sum.
//
// Every built-in kernel starts with fl_wait_for_prior_kernels() (before it
// touches memory) and fl_let_dependents_launch(), so the executor may join
// two of them with a programmatic graph edge: the second launches while the
// first runs and waits on the device instead of behind a launch.
#pragma once
#include "ring.cuh"

// Threads per block of the elementwise kernels (unpack, fir, filter2d).
#define FL_OP_THREADS 256
// Threads of the single block that reduces a frame (stats, threshold).
#define FL_REDUCE_THREADS 1024
// Longest FIR the kernels take (ops::MAX_FIR_TAPS).
#define FL_MAX_FIR_TAPS 63

// Samples of this frame an operator may touch: what unpack produced, and
// never more than the operator's buffers hold.
FL_DEVICE uint32_t fl_frame_samples(const FrameDesc* fd, uint32_t capacity) {
  uint32_t n = fd->n_samples;
  return n < capacity ? n : capacity;
}

// One block's ticket (one thread, after a barrier that followed the
// block's writes): an acquire-release add. Release: what the block wrote
// before it is visible device-wide before the ticket counts it. Acquire:
// the thread that takes the last ticket sees what every block counted
// before wrote (a barrier then extends that to its block's other threads).
// One round trip where a fence and a relaxed add took two. Returns the
// count before this block's.
FL_DEVICE uint32_t fl_take_ticket(uint32_t* ticket) {
  uint32_t before;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(ticket) : "memory");
  return before;
}

// This thread's index in the grid, and the grid's thread count.
FL_DEVICE uint64_t fl_grid_thread() { return (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; }
FL_DEVICE uint64_t fl_grid_threads() { return (uint64_t)gridDim.x * blockDim.x; }

// y = a * b + c rounded twice, as the CPU computes it.
FL_DEVICE float fl_mul_add(float a, float b, float c) { return __fadd_rn(__fmul_rn(a, b), c); }

// Copies `words` 16-byte words from `src` to `dst`, word i by copier
// (i mod copiers): copier `copier` of `copiers` issues four loads before its
// first store, so each thread has four reads in flight (over PCIe when `src`
// is a mapped slot).
FL_DEVICE void fl_copy_words(const uint4* src, uint4* dst, uint32_t words, uint32_t copier, uint32_t copiers) {
  for (uint32_t base = copier; base < words; base += 4u * copiers) {
    uint4 v[4];
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t i = base + k * copiers;
      if (i < words) v[k] = src[i];
    }
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      const uint32_t i = base + k * copiers;
      if (i < words) dst[i] = v[k];
    }
  }
}

// A graph kernel's `param_step` when its values are its arguments only.
#define FL_NO_PARAM_STEP 0xffffffffu

// The live values of chain operator `param_step` in the frame's parameter
// bank (src/gpu/param_banks.rs: one FusedStep per operator of the chain), or
// null when the loop has no banks or the operator takes none: the kernel then
// keeps its arguments. Read after fl_wait_for_prior_kernels (the handler
// writes the FrameDesc).
FL_DEVICE const FusedStep* fl_live_step(const FrameDesc* fd, uint32_t param_step) {
  if (param_step == FL_NO_PARAM_STEP || fd->params_dptr == 0) return nullptr;
  return (const FusedStep*)fd->params_dptr + param_step;
}
