// unpack kernels: one per sample format, grid-stride over the payload
// (any grid; the executor sizes it for the largest frame). `param_step`:
// where the frame's parameter bank holds scale and offset (fl_live_step).
#include "unpack.cuh"

extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_unpack_u8(FrameDesc* fd, float* out, uint32_t capacity, float scale, float offset, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  if (const FusedStep* live = fl_live_step(fd, param_step)) scale = live->a, offset = live->b;
  fl_unpack_range<FL_FMT_U8>(fd, out, capacity, scale, offset, fl_grid_thread(), fl_grid_threads());
}
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_unpack_u16(FrameDesc* fd, float* out, uint32_t capacity, float scale, float offset, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  if (const FusedStep* live = fl_live_step(fd, param_step)) scale = live->a, offset = live->b;
  fl_unpack_range<FL_FMT_U16>(fd, out, capacity, scale, offset, fl_grid_thread(), fl_grid_threads());
}
extern "C" __global__ void __launch_bounds__(FL_OP_THREADS)
    fl_unpack_u12(FrameDesc* fd, float* out, uint32_t capacity, float scale, float offset, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  if (const FusedStep* live = fl_live_step(fd, param_step)) scale = live->a, offset = live->b;
  fl_unpack_range<FL_FMT_U12>(fd, out, capacity, scale, offset, fl_grid_thread(), fl_grid_threads());
}
