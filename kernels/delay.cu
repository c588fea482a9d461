// delay: holds the chain for a fixed time on the GPU (one thread spinning on
// %globaltimer), so tests can make the GPU slower than the sender.
#include "ops_common.cuh"

// Block: one thread; grid: one block.
extern "C" __global__ void fl_delay(uint64_t delay_ns) {
  fl_wait_for_prior_kernels();
  uint64_t start = fl_globaltimer();
  while (fl_globaltimer() - start < delay_ns) __nanosleep(256);
}
