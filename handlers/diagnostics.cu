// Kernels that measure and test the loop rather than process frames: the
// persistent-kernel round-trip floor of the benchmark and an operator that
// faults on purpose (tests check that a fault names its stage).
#include "ring.cuh"

// One persistent thread echoing a host-published sequence back to the host:
// the physical floor of any host -> GPU -> host notification.
extern "C" __global__ void fl_floor_echo(const uint64_t* in_seq, uint64_t* out_seq, const uint64_t* stop) {
  uint64_t last = 0;
  while (fl_load_relaxed_sys(stop) == 0) {
    const uint64_t s = fl_load_acquire_sys(in_seq);
    if (s != last) {
      last = s;
      fl_store_release_sys(out_seq, s);
    }
  }
}

// Faults with an illegal address once the frame's ring sequence reaches `at_seq`.
extern "C" __global__ void fl_fault_at(const FrameDesc* desc, uint64_t at_seq) {
  if (desc->ring_seq >= at_seq) {
    volatile uint32_t* bad = (volatile uint32_t*)8ull;
    *bad = 0xdeadu;
  }
}

// Clock calibration: answers each host request (a new value in `request`) with
// the %globaltimer at which it saw it, until `stop` is set.
extern "C" __global__ void fl_clock_probe(const uint64_t* request, uint64_t* answer_seq, uint64_t* answer_ns,
                                          const uint64_t* stop) {
  uint64_t last = 0;
  while (fl_load_relaxed_sys(stop) == 0) {
    const uint64_t r = fl_load_acquire_sys(request);
    if (r != last) {
      last = r;
      fl_store_relaxed_sys(answer_ns, fl_globaltimer());
      fl_store_release_sys(answer_seq, r);
    }
  }
}
