// The data-ready handler's steps, shared by the built-in handler kernel
// (ring_ready.cu) and the fused chain (kernels/fused.cu): wait for the next
// frame of the ring, claim it, and keep the loop's counters and conditional
// values.
#pragma once
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

// Takes the parameter selection `sel` (a ParamControl::select value loaded
// relaxed) for the frames claimed from now on, and acknowledges it when it
// is new: the host rewrites a bank only once the handler acknowledged the
// other, and it is called only between two frames (none runs with the old
// bank any more). One thread.
FL_DEVICE void fl_take_params(const LoopParams& p, uint64_t sel) {
  DeviceLoopState* st = p.st;
  if (sel == st->param_select) return;
  // The bank was written before the host stored `sel`: order the frame's
  // reads of it after the load above (acquire by fence, paid on a change only).
  fl_fence_release_sys();
  st->param_select = sel;
  fl_store_relaxed_sys(&p.param_ctl->ack.v, sel);
}

// A word the poll watches besides the head (kernels/stream.cuh): the poll
// also ends, with no frame, once `*mark` (mapped memory) holds a value above
// `above` with the same upper half. A null `mark` watches nothing.
struct FlPollWatch {
  const uint64_t* mark;
  uint64_t above;
};

// Polls the frame ring for up to poll_budget_ns (one thread). Returns the
// verdict; on FL_VERDICT_READY `*head` is the head sequence seen. With no
// frame it sleeps sleep_ns (Holoscan style) if asked, unless the watched
// mark ended the poll (then it returns at once, so a pull may run).
FL_DEVICE uint32_t fl_poll_watching(const LoopParams& p, uint64_t t0, uint64_t* head_out, FlPollWatch watch) {
  DeviceLoopState* st = p.st;
  if (st->last_frame_ns == 0) st->last_frame_ns = t0;
  const uint64_t last = st->last_claimed;
  uint32_t verdict = FL_VERDICT_NONE;
  uint64_t head = last;
  uint64_t now = t0;
  bool progressed = false;
  for (;;) {
    // The loads are in flight together (no result is used before the last
    // is issued), so a poll costs one PCIe round trip, not two or three.
    const uint64_t stop = fl_load_relaxed_sys(&p.ctl->tear_down.v);
    const uint64_t mark = watch.mark != nullptr ? fl_load_relaxed_sys(watch.mark) : 0ull;
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
    if (watch.mark != nullptr && (mark >> 32) == (watch.above >> 32) && mark > watch.above) {
      progressed = true;
      break;
    }
    if (now - t0 >= p.poll_budget_ns) break;
    if (p.poll_interval_ns != 0) __nanosleep((unsigned)p.poll_interval_ns);
  }
  if (verdict == FL_VERDICT_NONE && p.sleep_ns != 0 && !progressed) fl_sleep_interruptible(p, p.sleep_ns);
  // No frame runs between iterations: take a new parameter set now, so that
  // the host may rewrite the other bank while no frame arrives.
  if (verdict == FL_VERDICT_NONE && p.param_ctl != nullptr) fl_take_params(p, fl_load_relaxed_sys(&p.param_ctl->select.v));
  st->verdict = verdict;
  *head_out = head;
  return verdict;
}

// fl_poll_watching with the watch the loop's pulls left in the loop state
// (none unless frames stream into device memory).
FL_DEVICE uint32_t fl_poll(const LoopParams& p, uint64_t t0, uint64_t* head_out) {
  const FlPollWatch watch = {p.st->pull_watch_mark, p.st->pull_watch_above};
  return fl_poll_watching(p, t0, head_out, watch);
}

// The sequence to claim when the head is `head` under the ring's policy
// (every: the next one; latest: the newest); tells the writer it is claimed.
FL_DEVICE uint64_t fl_claim_seq(const LoopParams& p, uint64_t head) {
  const uint64_t seq = p.policy == FL_POLICY_LATEST ? head : p.st->last_claimed + 1;
  fl_store_relaxed_sys(&p.ring->claimed_seq, seq);
  return seq;
}

// What a claim of slot `seq` reads: the slot header and, with parameter
// banks, the selection. One PCIe round trip: all eight 16-byte loads of
// the header and the selection are issued before the first is used
// (volatile 4-byte loads would cost 32). The acquire load of the head in
// fl_poll orders them after the writer's stores.
struct FlClaimRead {
  uint4 header[sizeof(SlotHeader) / sizeof(uint4)];
  uint64_t slot_dptr;
  uint64_t sel;
};

FL_DEVICE FlClaimRead fl_claim_read(const LoopParams& p, uint64_t seq) {
  FlClaimRead r;
  r.slot_dptr = fl_slot_dptr(p, seq);
  const uint4* src = (const uint4*)r.slot_dptr;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(SlotHeader) / sizeof(uint4)); ++i) r.header[i] = src[i];
  r.sel = p.param_ctl != nullptr ? fl_load_relaxed_sys(&p.param_ctl->select.v) : 0ull;
  return r;
}

// The claimed frame's payload length: the header's, at most the ring's capacity.
FL_DEVICE uint32_t fl_claim_len(const LoopParams& p, const FlClaimRead& r) {
  const uint32_t len = ((const SlotHeader*)r.header)->payload_len;
  return len < p.payload_capacity ? len : p.payload_capacity;
}

// The global time once `after` is known (the claim's detection time, taken
// when the header has arrived).
FL_DEVICE uint64_t fl_globaltimer_after(uint32_t after) {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : "r"(after));
  return t;
}

// Records the claim of `seq` read as `r` and detected at `detect_ns` (one
// thread): copies the slot header into `slot`, fills the FrameDesc `d`
// (payload read in place from the slot, the parameter bank `r.sel` names,
// which the caller has taken with fl_take_params), resets the ChainResult
// `c` and counts the frames skipped to reach it.
FL_DEVICE void fl_claim_write(const LoopParams& p, uint64_t seq, const FlClaimRead& r, uint64_t detect_ns,
                              SlotHeader* slot, FrameDesc* d, ChainResult* c) {
  DeviceLoopState* st = p.st;
  const uint64_t last = st->last_claimed;
  uint4* dst = (uint4*)slot;
#pragma unroll
  for (int i = 0; i < (int)(sizeof(SlotHeader) / sizeof(uint4)); ++i) dst[i] = r.header[i];
  d->payload_dptr = r.slot_dptr + FL_SLOT_PAYLOAD_OFFSET;
  d->slot_dptr = r.slot_dptr;
  d->ring_seq = seq;
  d->payload_len = fl_claim_len(p, r);
  d->n_samples = 0;
  d->skipped = seq - last - 1;
  d->detect_ns = detect_ns;
  if (p.param_ctl != nullptr) {
    d->params_dptr = (uint64_t)p.banks + (uint64_t)FL_SELECT_BANK(r.sel) * p.bank_bytes;
    d->param_generation = FL_SELECT_GENERATION(r.sel);
  } else {
    d->params_dptr = 0;
    d->param_generation = p.param_generation;
  }
  fl_reset_chain_result(c);
  st->last_claimed = seq;
  st->pull_watch_mark = nullptr;  // it watched this frame or an older one
  st->last_frame_ns = detect_ns;
  st->skipped += d->skipped;
}

// Claims `seq` (one thread): fl_claim_read, the frame's parameter bank
// taken, then fl_claim_write with the time the header arrived. The built-in handler passes the loop state's
// copies (device memory, read by the operator kernels); the fused chain
// passes its own in shared memory.
FL_DEVICE void fl_claim_slot(const LoopParams& p, uint64_t seq, SlotHeader* slot, FrameDesc* d, ChainResult* c) {
  const FlClaimRead r = fl_claim_read(p, seq);
  if (p.param_ctl != nullptr) fl_take_params(p, r.sel);
  fl_claim_write(p, seq, r, fl_globaltimer_after(fl_claim_len(p, r)), slot, d, c);
}

// fl_poll, then on a frame fl_claim_seq and fl_claim_slot: the built-in
// handler's whole look at the ring. Returns the verdict.
FL_DEVICE uint32_t fl_poll_and_claim(const LoopParams& p, uint64_t t0) {
  uint64_t head = 0;
  const uint32_t verdict = fl_poll(p, t0, &head);
  if (verdict == FL_VERDICT_READY)
    fl_claim_slot(p, fl_claim_seq(p, head), &p.st->slot, &p.st->desc, &p.st->chain);
  return verdict;
}

// The controller's work, done by a handler that does it itself (one
// thread): counts the iteration, sets the IF value when the loop has an IF
// node (`set_if`), publishes the counters (those of idle iterations at most
// every FL_COUNTER_PUBLISH_NS) and, on a stop verdict, ends the WHILE loop
// and publishes the final state. `t0`: when the handler started.
FL_DEVICE void fl_end_iteration(const LoopParams& p, uint32_t verdict, uint64_t t0, bool set_if) {
  DeviceLoopState* st = p.st;
  const uint64_t end = fl_globaltimer();
  st->handler_ns += end - t0;
  st->iterations += 1;
  if (verdict == FL_VERDICT_READY) {
    if (set_if) cudaGraphSetConditional(p.if_handle, 1u);
    st->frames += 1;
    // Posted stores after the IF value: the host reads them to tell a fault
    // inside the workload from one between frames.
    fl_store_relaxed_sys(&p.ctl->frames.v, st->frames);
    fl_store_relaxed_sys(&p.ctl->skipped.v, st->skipped);
    return;
  }
  if (set_if) cudaGraphSetConditional(p.if_handle, 0u);
  if (verdict == FL_VERDICT_NONE) {
    st->idle_iterations += 1;
    if (end - st->counters_ns >= FL_COUNTER_PUBLISH_NS) fl_publish_counters(p, st, end);
  } else {
    fl_publish_counters(p, st, end);
    cudaGraphSetConditional(p.while_handle, 0u);
    fl_store_release_sys(&p.ctl->state.v, (uint64_t)st->stop_state);
  }
}
