// fused chain: the data-ready handler and a whole chain of built-in
// operators in one kernel of one block (src/gpu/fused.rs encodes the chain).
// Thread 0 polls the ring and claims a frame exactly as fl_ring_ready does;
// then every thread runs the steps in order, with a block barrier between
// two steps, and thread 0 publishes the result. A frame costs one kernel,
// where the graph path costs the handler, the IF body's launch and one
// kernel per operator.
#include "fir.cuh"
#include "filter2d.cuh"
#include "reduce.cuh"
#include "ring_ready.cuh"
#include "unpack.cuh"

// The block: FL_REDUCE_THREADS threads, as the reductions need.
#define FL_FUSED_THREADS FL_REDUCE_THREADS

// Runs one step on the whole block; `taps` and `tile` are the FIR's shared scratch.
FL_DEVICE void fl_run_step(const FusedStep& s, const FusedProgram* prog, FrameDesc* fd, ChainResult* chain,
                           float* taps, float* tile) {
  float* in = prog->buffers[s.input & 1u];
  float* out = prog->buffers[s.output & 1u];
  const uint32_t cap = prog->capacity;
  switch (s.kind) {
    case FL_STEP_UNPACK_U8:
      fl_unpack_range<FL_FMT_U8>(fd, out, cap, s.a, s.b, threadIdx.x, FL_FUSED_THREADS);
      break;
    case FL_STEP_UNPACK_U16:
      fl_unpack_range<FL_FMT_U16>(fd, out, cap, s.a, s.b, threadIdx.x, FL_FUSED_THREADS);
      break;
    case FL_STEP_UNPACK_U12:
      fl_unpack_range<FL_FMT_U12>(fd, out, cap, s.a, s.b, threadIdx.x, FL_FUSED_THREADS);
      break;
    case FL_STEP_FIR:
      if (threadIdx.x < FL_MAX_FIR_TAPS) taps[threadIdx.x] = s.coeffs[threadIdx.x];
      __syncthreads();
      fl_fir_tiles<FL_FUSED_THREADS>(fd, in, out, cap, s.count, taps, 0, 1, tile);
      break;
    case FL_STEP_FILTER2D:
      fl_filter2d_range(fd, in, out, cap, s.count, s.coeffs, threadIdx.x, FL_FUSED_THREADS);
      break;
    case FL_STEP_STATS:
      fl_reduce_block<true, false>(fd, in, cap, chain, 0.0f);
      break;
    case FL_STEP_THRESHOLD:
      fl_reduce_block<false, true>(fd, in, cap, chain, s.a);
      break;
    case FL_STEP_STATS_THRESHOLD:
      fl_reduce_block<true, true>(fd, in, cap, chain, s.a);
      break;
    case FL_STEP_DELAY:
      if (threadIdx.x == 0) {
        const uint64_t start = fl_globaltimer();
        while (fl_globaltimer() - start < s.delay_ns) __nanosleep(256);
      }
      break;
    default:
      break;
  }
  // The next step reads what this one wrote (and FrameDesc::n_samples).
  __syncthreads();
}

// The loop body of a fused loop: WHILE { fl_fused_chain }. One block of
// FL_FUSED_THREADS; LoopParams::program is set.
extern "C" __global__ void __launch_bounds__(FL_FUSED_THREADS) fl_fused_chain(LoopParams p) {
  __shared__ uint32_t verdict;
  __shared__ float taps[FL_MAX_FIR_TAPS];
  __shared__ float tile[FL_FUSED_THREADS + FL_MAX_FIR_TAPS - 1];
  if (threadIdx.x == 0) {
    const uint64_t t0 = fl_globaltimer();
    verdict = fl_poll_and_claim(p, t0);
    fl_end_iteration(p, verdict, t0, false);
  }
  // The other threads wait here while thread 0 polls; the claim (FrameDesc,
  // ChainResult reset, slot header copy) is visible to them after it.
  __syncthreads();
  if (verdict != FL_VERDICT_READY) return;
  const FusedProgram* prog = p.program;
  DeviceLoopState* st = p.st;
  const uint32_t steps = prog->step_count < FL_FUSED_MAX_STEPS ? prog->step_count : FL_FUSED_MAX_STEPS;
  for (uint32_t i = 0; i < steps; ++i) fl_run_step(prog->steps[i], prog, &st->desc, &st->chain, taps, tile);
  if (threadIdx.x == 0) fl_publish_result(p);
}
