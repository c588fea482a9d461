// delay: holds the chain for a fixed time on the GPU (one thread spinning on
// %globaltimer), so tests can make the GPU slower than the sender.
#include "ops_common.cuh"

// Block: one thread; grid: one block.
// `param_step`: where the frame's parameter bank holds the delay (fl_live_step).
extern "C" __global__ void fl_delay(uint64_t delay_ns, const FrameDesc* fd, uint32_t param_step) {
  fl_wait_for_prior_kernels();
  if (const FusedStep* live = fl_live_step(fd, param_step)) delay_ns = live->delay_ns;
  uint64_t start = fl_globaltimer();
  while (fl_globaltimer() - start < delay_ns) __nanosleep(256);
}
