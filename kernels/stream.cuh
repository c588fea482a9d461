// Sub-frame streaming's state (src/gpu/streaming.rs): what the pulls have
// copied of the frame after the last claimed one into the staging buffer.
// Shared by the pull and tail kernels (stage.cu) and by the tiled fused
// kernel, which reads a streamed frame's pulled part from the staging
// buffer and the rest from the slot itself.
#pragma once
#include "ops_common.cuh"
#include "ring_ready.cuh"

// Device memory, zeroed at allocation. `seq`/`pulled`: the staging buffer
// holds bytes [0, pulled) of ring sequence `seq` (pulled a multiple of 16).
// `pending_not`/`ticket`: the running pull's agreement (fl_stream_pull, stage.cu).
// `end_guard`: written by the host once (loop.pull_end_guard_bytes,
// src/gpu/streaming.rs): the last bytes of a frame's expected length (the
// last claimed frame's) the poll does not end a pull for (0: pull to the end).
struct FlStreamState {
  unsigned long long seq;
  unsigned long long pulled;
  unsigned long long pending_not;  // max over blocks of ~end (0: none yet)
  unsigned int ticket;             // blocks of the running pull that are done
  unsigned int _pad;
  unsigned long long end_guard;    // at byte 32 (END_GUARD_OFFSET, src/gpu/streaming.rs)
};
static_assert(sizeof(FlStreamState) == 40, "FlStreamState: end_guard must stay last, at byte 32");

// The next pull: the frame after the last claimed one (ring sequence `seq`,
// its slot's device address `slot`) and the 16-byte words [from, end) of it
// that its received mark says are final and the staging buffer of
// `capacity_words` words does not hold yet (from == end: nothing new).
struct FlPullRange {
  unsigned long long seq;
  unsigned long long slot;
  unsigned int from;
  unsigned int end;
};

// The frame the pulls work on, the one after the last claimed: its ring
// sequence, its slot's device address and the bytes of it the staging
// buffer holds.
struct FlPullTarget {
  uint64_t seq;
  uint64_t slot;
  uint64_t pulled;
};

FL_DEVICE FlPullTarget fl_pull_target(const LoopParams& p, const FlStreamState* s) {
  FlPullTarget t;
  t.seq = p.st->last_claimed + 1;
  t.slot = fl_slot_dptr(p, t.seq);
  t.pulled = s->seq == t.seq ? s->pulled : 0ull;
  return t;
}

// One thread: the 16-byte words of ring sequence `seq` that the received
// mark of its slot (device address `slot`) says are final, at most
// `capacity_words`; 0 while the mark is another frame's. Reads the mark over
// the bus. Bytes under the mark never change until the slot is reused,
// which needs this frame consumed first.
FL_DEVICE uint32_t fl_marked_words(uint64_t slot, uint64_t seq, uint32_t capacity_words) {
  const uint64_t mark = fl_load_acquire_sys(&((const SlotHeader*)slot)->received_mark);
  if ((uint32_t)(mark >> 32) != (uint32_t)seq) return 0;
  const uint64_t words = (mark & 0xffffffffull) / 16u;
  return words < capacity_words ? (uint32_t)words : capacity_words;
}

// The bytes of the frame after the last claimed one that the pulls may
// take before it is claimed: its expected length (the last claimed
// frame's) less `end_guard` (loop.pull_end_guard_bytes); no limit (~0) with
// the guard off or a frame expected no longer than it.
FL_DEVICE uint64_t fl_pull_guard_end(const LoopParams& p, const FlStreamState* s) {
  const uint64_t guard = s->end_guard, expected = p.st->desc.payload_len;
  return guard != 0 && expected > guard ? expected - guard : ~0ull;
}

// One thread: the next pull (fl_marked_words past what the staging buffer holds).
FL_DEVICE FlPullRange fl_next_pull(const LoopParams& p, const FlStreamState* s, uint32_t capacity_words) {
  const FlPullTarget t = fl_pull_target(p, s);
  FlPullRange r;
  r.seq = t.seq;
  r.slot = t.slot;
  r.from = (uint32_t)(t.pulled / 16u);
  const uint32_t words = fl_marked_words(r.slot, r.seq, capacity_words);
  r.end = words > r.from ? words : r.from;
  return r;
}

// How far the received mark must pass the pulled length before the poll
// ends for a pull (bytes): by default one 16-byte word, so a pull runs as
// soon as it has words to copy. A larger step pulls less often (the poll's
// own budget still ends it for whatever is there).
#ifndef FL_PULL_WATCH_BYTES
#define FL_PULL_WATCH_BYTES 16u
#endif

// What the poll of the frame after the last claimed one watches
// (FlPollWatch, handlers/ring_ready.cuh): its received mark, to pass the
// pulled length by FL_PULL_WATCH_BYTES. Nothing to watch once the staging
// buffer is full, or once the pulls are within `end_guard` of the frame's
// expected length (the last claimed frame's, whichever handler claimed it):
// then the poll waits for the frame to be published (or its budget to run
// out) rather than start a pull that would hold the grid when it is.
FL_DEVICE FlPollWatch fl_pull_watch(const LoopParams& p, const FlStreamState* s, uint32_t capacity_words) {
  const FlPullTarget t = fl_pull_target(p, s);
  FlPollWatch w = {nullptr, 0ull};
  const uint64_t above = t.pulled + (uint64_t)FL_PULL_WATCH_BYTES - 1u;
  if (t.pulled / 16u >= capacity_words || above > 0xffffffffull || above >= fl_pull_guard_end(p, s)) return w;
  w.mark = &((const SlotHeader*)t.slot)->received_mark;
  w.above = ((t.seq & 0xffffffffull) << 32) | above;
  return w;
}
