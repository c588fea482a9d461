// The built-in data-ready handler of the resident loop and the loop's own
// kernels: the one-thread controller, the end marker that publishes a result,
// and the stage marker used to name a faulting stage.
#include "ring_ready.cuh"

// One loop iteration's look at the frame ring (fl_poll_and_claim). With
// handler_sets_if it is the controller too (fl_end_iteration): it sets the IF
// (and, to stop, the WHILE) value itself and keeps the counters, so the loop
// body is handler -> IF alone. Otherwise the controller node reads its verdict.
extern "C" __global__ void fl_ring_ready(LoopParams p) {
  const uint64_t t0 = fl_globaltimer();
  if (p.stage_markers) fl_mark_stage(p, FL_STAGE_HANDLER, p.st->last_claimed);
  const uint32_t verdict = fl_poll_and_claim(p, t0);
  if (p.handler_sets_if) {
    fl_end_iteration(p, verdict, t0, true);
  } else {
    p.st->handler_ns += fl_globaltimer() - t0;
  }
}

// One thread: turns the handler's verdict into the loop's conditional values
// and publishes the counters to the host. Runs in front of the IF, for
// handler fragments that cannot set the IF value themselves (the built-in
// handler does this work itself and the loop has no controller node).
extern "C" __global__ void fl_loop_controller(LoopParams p) {
  DeviceLoopState* st = p.st;
  LoopControl* ctl = p.ctl;
  const uint32_t verdict = st->verdict;
  if (!p.handler_sets_if) cudaGraphSetConditional(p.if_handle, verdict == FL_VERDICT_READY ? 1u : 0u);
  st->iterations += 1;
  fl_store_relaxed_sys(&ctl->iterations.v, st->iterations);
  if (verdict == FL_VERDICT_READY) {
    st->frames += 1;
    fl_store_relaxed_sys(&ctl->frames.v, st->frames);
    fl_store_relaxed_sys(&ctl->skipped.v, st->skipped);
  } else {
    st->idle_iterations += 1;
    fl_store_relaxed_sys(&ctl->idle_iterations.v, st->idle_iterations);
  }
  fl_store_relaxed_sys(&ctl->handler_ns.v, st->handler_ns);
  fl_store_relaxed_sys(&ctl->heartbeat_ns.v, fl_globaltimer());
  if (verdict == FL_VERDICT_STOP) {
    cudaGraphSetConditional(p.while_handle, 0u);
    fl_store_release_sys(&ctl->state.v, (uint64_t)st->stop_state);
  }
}

// The end marker: publishes the frame's result (fl_publish_result). Used
// after user operators and with stage markers; a chain ending in a built-in
// reduction publishes from that kernel's epilogue instead.
extern "C" __global__ void fl_end_marker(LoopParams p) {
  fl_wait_for_prior_kernels();
  if (p.stage_markers) fl_mark_stage(p, FL_STAGE_END_MARKER, p.st->desc.ring_seq);
  fl_publish_result(p);
  if (p.stage_markers) fl_mark_stage(p, FL_STAGE_IDLE, p.st->desc.ring_seq);
}

// Stage marker node (only with stage markers on): records which operator is
// about to run, so that a fault can be attributed to it.
extern "C" __global__ void fl_stage_marker(LoopParams p, uint64_t stage) {
  fl_mark_stage(p, stage, p.st->desc.ring_seq);
}
