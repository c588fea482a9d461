// fused chain: the data-ready handler and a whole chain of built-in
// operators in one kernel of one block (src/gpu/fused.rs encodes the chain).
// Thread 0 polls the ring as fl_ring_ready does. When a frame arrives it
// reads the slot header while the other warps copy the payload into shared
// memory (both in one PCIe round trip, when the program stages it); then
// every thread runs the steps in order, with a block barrier between two
// steps, on sample buffers in shared memory when they fit, and thread 0
// publishes the result. A frame costs one kernel, where the graph path
// costs the handler, the IF body's launch and one kernel per operator.
#include "fir.cuh"
#include "filter2d.cuh"
#include "reduce.cuh"
#include "ring_ready.cuh"
#include "unpack.cuh"

// The block: FL_REDUCE_THREADS threads, as the reductions need.
#define FL_FUSED_THREADS FL_REDUCE_THREADS

// Dynamic shared memory: [staged payload, stage_bytes][buffer 0][buffer 1].
extern __shared__ uint4 fl_fused_smem[];

// Where a launch keeps its samples: the program's buffers resolved once.
struct FusedBuffers {
  float* b0;
  float* b1;
  uint32_t capacity;  // floats in each
  bool shared;        // both in shared memory
};

// Runs one step on the whole block; `taps` and `tile` are the FIR's shared
// scratch. `s` and `fd` are in shared memory: the poll's system-scope
// acquire invalidates the L1 cache, so whatever a step reads from global
// memory costs an L2 round trip per frame.
FL_DEVICE void fl_run_step(const FusedStep& s, const FusedBuffers& buf, FrameDesc* fd, ChainResult* chain,
                           float* taps, float* tile) {
  // Selected, not indexed: an indexed pair of pointers would live in local memory.
  float* in = (s.input & 1u) ? buf.b1 : buf.b0;
  float* out = (s.output & 1u) ? buf.b1 : buf.b0;
  const uint32_t cap = buf.capacity;
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
      if (buf.shared && s.count <= FL_FIR_QUAD_MAX_TAPS && ((uint64_t)in | (uint64_t)out) % 16 == 0)
        fl_fir_quads(fd, in, out, cap, s.count, taps, threadIdx.x, FL_FUSED_THREADS);
      else if (buf.shared)
        fl_fir_direct(fd, in, out, cap, s.count, taps, threadIdx.x, FL_FUSED_THREADS);
      else
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
    case FL_STEP_FAULT_AT:
      if (threadIdx.x == 0 && fd->ring_seq >= s.count) {
        volatile uint32_t* bad = (volatile uint32_t*)8ull;
        *bad = 0xdeadu;
      }
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

// Bytes of the dummy frame of fl_warm_up.
// The buffer holding the chain's final samples: the output of the last
// step that writes samples (reductions pass theirs through), or null.
FL_DEVICE const float* fl_fused_final(const FusedStep* steps, uint32_t step_count, const FusedBuffers& buf) {
  const float* last = nullptr;
  for (uint32_t i = 0; i < step_count; ++i) {
    const uint32_t k = steps[i].kind;
    if (k == FL_STEP_UNPACK_U8 || k == FL_STEP_UNPACK_U16 || k == FL_STEP_UNPACK_U12 || k == FL_STEP_FIR ||
        k == FL_STEP_FILTER2D)
      last = (steps[i].output & 1u) ? buf.b1 : buf.b0;
  }
  return last;
}

#define FL_WARM_UP_BYTES 256u

// Runs every step but delays (and the diagnostic fault) once on a small dummy frame (`payload`, any
// scratch of at least `len` bytes; results go to shared scratch), so that
// the steps' instructions and parameters are cached on the SM this launch
// landed on before a frame arrives; a frame otherwise waits while a cold SM
// fetches them. Costs a few microseconds per launch, before polling starts.
FL_DEVICE void fl_warm_up(const FusedStep* steps, uint32_t step_count, const FusedBuffers& buf,
                          const uint8_t* payload, uint32_t len, float* taps, float* tile) {
  __shared__ FrameDesc fd;
  __shared__ ChainResult chain;
  if (threadIdx.x == 0) {
    fd.payload_dptr = (uint64_t)payload;
    fd.payload_len = len;
    fd.n_samples = 0;
  }
  __syncthreads();
  for (uint32_t i = 0; i < step_count; ++i)
    if (steps[i].kind != FL_STEP_DELAY && steps[i].kind != FL_STEP_FAULT_AT)
      fl_run_step(steps[i], buf, &fd, &chain, taps, tile);
}

// The loop body of a fused loop: WHILE { fl_fused_chain }. One block of
// FL_FUSED_THREADS with the dynamic shared memory the program asks for;
// LoopParams::program is set. Returns (ending the loop iteration) when a
// poll budget passes without a frame, or on tear-down or timeout.
extern "C" __global__ void __launch_bounds__(FL_FUSED_THREADS) fl_fused_chain(LoopParams p) {
  __shared__ uint32_t verdict;
  __shared__ uint64_t claimed;
  __shared__ uint64_t t0;
  __shared__ float taps[FL_MAX_FIR_TAPS];
  __shared__ float tile[FL_FUSED_THREADS + FL_MAX_FIR_TAPS - 1];
  __shared__ FusedStep steps[FL_FUSED_MAX_STEPS];
  // The claimed frame as the steps and the publication read it.
  __shared__ FrameDesc desc;
  __shared__ ChainResult chain;
  __shared__ SlotHeader slot;
  const FusedProgram* prog = p.program;
  const uint32_t step_count = prog->step_count < FL_FUSED_MAX_STEPS ? prog->step_count : FL_FUSED_MAX_STEPS;
  const uint32_t stage_bytes = prog->stage_bytes;
  uint8_t* smem = (uint8_t*)fl_fused_smem;
  FusedBuffers buf = {prog->buffers[0], prog->buffers[1], prog->capacity, prog->shared_buffers != 0};
  if (buf.shared) {
    buf.b0 = (float*)(smem + stage_bytes);
    buf.b1 = buf.b0 + buf.capacity;
  }
  DeviceLoopState* st = p.st;
  // The steps into shared memory, once per launch and again when a frame
  // brings a new parameter bank (their tunable values live in the banks,
  // src/gpu/param_banks.rs; without banks, in the program).
  const FusedStep* loaded =
      p.banks != nullptr ? (const FusedStep*)(p.banks + (uint64_t)FL_SELECT_BANK(st->param_select) * p.bank_bytes)
                         : prog->steps;
  fl_copy_words((const uint4*)loaded, (uint4*)steps, step_count * (uint32_t)(sizeof(FusedStep) / 16), threadIdx.x,
                FL_FUSED_THREADS);
  __syncthreads();
  {
    // The dummy payload: the staging area, else buffer 1 (unpack writes buffer 0).
    const uint32_t room = stage_bytes != 0 ? stage_bytes : buf.capacity * 4u;
    fl_warm_up(steps, step_count, buf, stage_bytes != 0 ? smem : (const uint8_t*)buf.b1,
               room < FL_WARM_UP_BYTES ? room : FL_WARM_UP_BYTES, taps, tile);
  }
  // Thread 0 numbers the results; the loop state keeps the count between launches.
  uint64_t result_seq = threadIdx.x == 0 ? st->result_seq : 0;
  // Where the chain's final samples end up: a parameter change reloads the
  // steps' values, never their kinds or buffers, so this holds for the launch.
  const float* final_samples = threadIdx.x == 0 ? fl_fused_final(steps, step_count, buf) : nullptr;
  // Frames one after another while they keep coming within the poll budget:
  // the block stays on its SM with warm caches instead of relaunching.
  for (;;) {
    if (threadIdx.x == 0) {
      t0 = fl_globaltimer();
      uint64_t head = 0;
      verdict = fl_poll(p, t0, &head);
      if (verdict == FL_VERDICT_READY) {
        claimed = fl_claim_seq(p, head);
      } else {
        fl_end_iteration(p, verdict, t0, false);
      }
    }
    // The other threads wait here while thread 0 polls.
    __syncthreads();
    if (verdict != FL_VERDICT_READY) return;
    if (threadIdx.x == 0) {
      fl_claim_slot(p, claimed, &slot, &desc, &chain);
      // Staged: the operators read the payload from shared memory (a generic address).
      if (stage_bytes != 0) desc.payload_dptr = (uint64_t)smem;
      fl_end_iteration(p, FL_VERDICT_READY, t0, false);
    } else if (threadIdx.x >= 32 && stage_bytes != 0) {
      // Every warp but the first (whose lane 0 reads the slot header meanwhile).
      fl_copy_words((const uint4*)(fl_slot_dptr(p, claimed) + FL_SLOT_PAYLOAD_OFFSET), fl_fused_smem,
                    stage_bytes / 16u, threadIdx.x - 32u, FL_FUSED_THREADS - 32u);
    }
    // The claim (FrameDesc, ChainResult reset, slot header) and the staged
    // payload are visible to every thread after this.
    __syncthreads();
    if (desc.params_dptr != 0 && desc.params_dptr != (uint64_t)loaded) {
      // A new parameter set (same steps, other values): every thread reloads its share.
      loaded = (const FusedStep*)desc.params_dptr;
      fl_copy_words((const uint4*)loaded, (uint4*)steps, step_count * (uint32_t)(sizeof(FusedStep) / 16),
                    threadIdx.x, FL_FUSED_THREADS);
      __syncthreads();
    }
    for (uint32_t i = 0; i < step_count; ++i) fl_run_step(steps[i], buf, &desc, &chain, taps, tile);
    if (threadIdx.x == 0) {
      // From shared memory and a register: no global read on the way out.
      result_seq += 1;
      fl_publish_record(p, desc, chain, slot, result_seq, final_samples, buf.capacity);
      st->result_seq = result_seq;
    }
    // Thread 0 publishes before it polls again; the others must not reuse
    // the staging area before the next claim, which the barrier after the
    // poll guarantees.
  }
}
