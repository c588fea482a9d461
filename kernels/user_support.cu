// user_support: the stand-alone prologue the appliance runs in front of a
// user kernel (an `op = "kernel"` chain entry, kernels/frameloop.cuh) whose
// source cannot be wrapped into one entry kernel (gpu::user::kernel).
// fl_user_prologue fills the operator's fl_frame (kernels/user_frame.cuh),
// makes the FrameDesc's sample count the operator's output count for the
// operators after it, and for the chain's first user kernel zeroes the
// frame's user result words.
#include "user_frame.cuh"

// Threads of the one block of fl_user_prologue (one warp).
#define FL_USER_PROLOGUE_THREADS 32

// fd: the FrameDesc; slot: the loop state's copy of the claimed slot's
// header; frame: this operator's fl_frame; first: the chain's
// first user kernel's fl_frame, already filled for this frame, or null for
// that kernel itself (which reads `slot` and zeroes `user`, the
// frame's user result words); in_capacity / out_capacity / fixed_out: as
// fl_user_fill_frame takes them; params / param_bytes / param_step: the
// user kernel's parameter struct, its size and its step in the frame's
// parameter bank (FL_NO_PARAM_STEP: the struct stays as loaded), copied
// from the bank before the user kernel runs. One block of
// FL_USER_PROLOGUE_THREADS.
extern "C" __global__ void __launch_bounds__(FL_USER_PROLOGUE_THREADS)
    fl_user_prologue(FrameDesc* fd, const SlotHeader* slot, fl_frame* frame, const fl_frame* first,
                     fl_user_result* user, uint32_t in_capacity, uint32_t out_capacity, uint32_t fixed_out,
                     uint32_t* params, uint32_t param_bytes, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  const uint32_t t = threadIdx.x;
  if (first == nullptr && t < FL_USER_RESULT_WORDS) user->words[t] = 0u;
  if (first == nullptr && t == 0) user->request_actuation = 0u;
  if (const FusedStep* live = fl_live_step(fd, param_step)) {
    const uint32_t* words = (const uint32_t*)live->coeffs;
    for (uint32_t w = t; w * 4u < param_bytes && w < FL_FUSED_COEFFS; w += blockDim.x) params[w] = words[w];
  }
  if (t != 0) return;
  fl_user_fill_frame(frame, fd, slot, first, in_capacity, out_capacity, fixed_out);
  fd->n_samples = frame->out_count;
}
