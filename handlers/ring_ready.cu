// The built-in data-ready handler of the resident loop and the loop's own
// kernels: the one-thread controller, the end marker that publishes a result,
// and the stage marker used to name a faulting stage.
#include "ring.cuh"

// Resets the reduction values for a newly claimed frame.
FL_DEVICE void fl_reset_chain_result(ChainResult* c) {
  c->sum = 0.0f;
  c->min = fl_pos_inf();
  c->max = fl_neg_inf();
  c->mean = 0.0f;
  c->detect_count = 0;
  c->first_detect_index = -1;
}

FL_DEVICE void fl_mark_stage(const LoopParams& p, uint64_t stage, uint64_t seq) {
  fl_store_relaxed_sys(&p.ctl->stage_seq.v, seq);
  fl_store_relaxed_sys(&p.ctl->stage.v, stage);
  __threadfence_system();
}

// Sleeps about `ns` nanoseconds, waking early when the host asks for tear-down.
FL_DEVICE void fl_sleep_interruptible(const LoopParams& p, uint64_t ns) {
  const uint64_t start = fl_globaltimer();
  for (;;) {
    const uint64_t elapsed = fl_globaltimer() - start;
    if (elapsed >= ns || fl_load_relaxed_sys(&p.ctl->tear_down.v)) return;
    const uint64_t left = ns - elapsed;
    __nanosleep((unsigned)(left < 100000ull ? left : 100000ull));
  }
}

// Publishes the loop's idle-time counters to the control block: posted
// stores, no fence.
FL_DEVICE void fl_publish_counters(const LoopParams& p, DeviceLoopState* st, uint64_t now) {
  LoopControl* ctl = p.ctl;
  fl_store_relaxed_sys(&ctl->iterations.v, st->iterations);
  fl_store_relaxed_sys(&ctl->idle_iterations.v, st->idle_iterations);
  fl_store_relaxed_sys(&ctl->handler_ns.v, st->handler_ns);
  fl_store_relaxed_sys(&ctl->heartbeat_ns.v, now);
  st->counters_ns = now;
}

// One loop iteration's look at the frame ring. Claims the next frame under the
// ring's policy (every: the next sequence; latest: the newest, counting the
// skipped ones), polling for up to poll_budget_ns; records the verdict for the
// controller. With handler_sets_if it is the controller too: it sets the IF
// (and, to stop, the WHILE) value itself and keeps the counters, so the loop
// body is handler -> IF alone. From seeing the new head to returning it does
// one PCIe round trip (the slot header) and no sleep; the counters of idle
// iterations go out at most every FL_COUNTER_PUBLISH_NS, those of a frame
// after its result.
extern "C" __global__ void fl_ring_ready(LoopParams p) {
  DeviceLoopState* st = p.st;
  const uint64_t t0 = fl_globaltimer();
  if (p.stage_markers) fl_mark_stage(p, FL_STAGE_HANDLER, st->last_claimed);
  if (st->last_frame_ns == 0) st->last_frame_ns = t0;
  const uint64_t last = st->last_claimed;
  uint32_t verdict = FL_VERDICT_NONE;
  uint64_t head = last;
  uint64_t now = t0;
  for (;;) {
    // Both loads are in flight together (neither result is used before the
    // second is issued), so a poll costs one PCIe round trip, not two.
    const uint64_t stop = fl_load_relaxed_sys(&p.ctl->tear_down.v);
    if (!p.host_driven) head = fl_load_acquire_sys(&p.ring->head_seq);
    if (stop) {
      verdict = FL_VERDICT_STOP;
      st->stop_state = (uint32_t)FL_STATE_TORN_DOWN;
      break;
    }
    if (p.host_driven && fl_load_relaxed_sys(&p.ctl->data_ready.v) != 0 && fl_take_flag_sys(&p.ctl->data_ready.v) != 0)
      head = fl_load_acquire_sys(&p.ring->head_seq);
    if (head != last) {
      verdict = FL_VERDICT_READY;
      break;
    }
    now = fl_globaltimer();
    if (p.timeout_ns != 0 && now - st->last_frame_ns >= p.timeout_ns) {
      verdict = FL_VERDICT_STOP;
      st->stop_state = (uint32_t)FL_STATE_TIMED_OUT;
      break;
    }
    if (now - t0 >= p.poll_budget_ns) break;
    if (p.poll_interval_ns != 0) __nanosleep((unsigned)p.poll_interval_ns);
  }

  if (verdict == FL_VERDICT_READY) {
    const uint64_t seq = p.policy == FL_POLICY_LATEST ? head : last + 1;
    fl_store_relaxed_sys(&p.ring->claimed_seq, seq);
    const uint64_t slot = fl_slot_dptr(p, seq);
    // The acquire load of head_seq orders these plain reads after the writer's
    // stores. All eight 16-byte loads are issued before the first is used, so
    // the header costs one PCIe round trip (volatile 4-byte loads would cost 32).
    const uint4* src = (const uint4*)slot;
    uint4 header[sizeof(SlotHeader) / sizeof(uint4)];
#pragma unroll
    for (int i = 0; i < (int)(sizeof(SlotHeader) / sizeof(uint4)); ++i) header[i] = src[i];
    uint4* dst = (uint4*)&st->slot;
#pragma unroll
    for (int i = 0; i < (int)(sizeof(SlotHeader) / sizeof(uint4)); ++i) dst[i] = header[i];
    FrameDesc* d = &st->desc;
    d->payload_dptr = slot + FL_SLOT_PAYLOAD_OFFSET;
    d->slot_dptr = slot;
    d->ring_seq = seq;
    const uint32_t len = st->slot.payload_len;
    d->payload_len = len < p.payload_capacity ? len : p.payload_capacity;
    d->n_samples = 0;
    d->skipped = seq - last - 1;
    d->detect_ns = fl_globaltimer();
    fl_reset_chain_result(&st->chain);
    st->last_claimed = seq;
    st->last_frame_ns = d->detect_ns;
    st->skipped += d->skipped;
    if (p.handler_sets_if) {
      cudaGraphSetConditional(p.if_handle, 1u);
      st->iterations += 1;
      st->frames += 1;
      // Posted stores after the IF value: the host reads them to tell a fault
      // inside the workload from one between frames.
      fl_store_relaxed_sys(&p.ctl->frames.v, st->frames);
      fl_store_relaxed_sys(&p.ctl->skipped.v, st->skipped);
    }
  } else if (verdict == FL_VERDICT_NONE && p.sleep_ns != 0) {
    fl_sleep_interruptible(p, p.sleep_ns);
  }
  st->verdict = verdict;
  const uint64_t end = fl_globaltimer();
  st->handler_ns += end - t0;
  if (!p.handler_sets_if || verdict == FL_VERDICT_READY) return;
  cudaGraphSetConditional(p.if_handle, 0u);
  st->iterations += 1;
  if (verdict == FL_VERDICT_NONE) {
    st->idle_iterations += 1;
    if (end - st->counters_ns >= FL_COUNTER_PUBLISH_NS) fl_publish_counters(p, st, end);
  } else {
    fl_publish_counters(p, st, end);
    cudaGraphSetConditional(p.while_handle, 0u);
    fl_store_release_sys(&p.ctl->state.v, (uint64_t)st->stop_state);
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
