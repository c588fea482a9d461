// frameloop actuation: the CUDA mirror of the transmit ring
// (src/actuate/ring.rs) and of the actuation message (src/wire/actuation.rs),
// and the device former: one thread writes a frame's messages, header and
// payload, into the transmit ring in mapped host memory and publishes each
// with the ring's protocol (slot sequence, then head, release stores). The
// layout test (tests/gpu_kernels_compile.rs) checks every size, offset and
// constant below against the Rust values.
#pragma once
#include "ring.cuh"

#define FL_TX_MAGIC 0x58544c46u  // "FLTX" little-endian
#define FL_TX_LAYOUT_VERSION 1u
#define FL_TX_SLOTS_OFFSET 256u
#define FL_TX_DATAGRAM_OFFSET 64u
#define FL_TX_MAX_OUTPUTS 8

#define FL_ACT_MAGIC 0x43414c46u  // "FLAC" little-endian
#define FL_ACT_VERSION 1u
#define FL_ACT_HEADER_LEN 64u
#define FL_ACT_PART_RECORD (1u << 0)
#define FL_ACT_PART_USER (1u << 1)
#define FL_ACT_PART_SAMPLES (1u << 2)
#define FL_ACT_FLAG_DETECTED (1u << 0)
#define FL_ACT_FLAG_USER_REQUEST (1u << 1)
#define FL_ACT_FLAG_INCOMPLETE (1u << 2)
#define FL_ACT_FLAG_SAMPLES_SHORT (1u << 3)

// When an output sends (ActuateConfig::when).
#define FL_ACT_WHEN_EVERY 0u
#define FL_ACT_WHEN_DETECTION 1u
#define FL_ACT_WHEN_FLAG 2u

struct alignas(64) TxRingHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t max_datagram;
  uint32_t _reserved0[11];
  uint64_t head_seq;  // producer: release store
  uint64_t _pad1[7];
  uint64_t consumed_seq;  // the host sender: release store
  uint64_t _pad2[7];
  uint64_t dropped[FL_TX_MAX_OUTPUTS];  // per output: ring full (producer only)
};

struct alignas(64) TxSlotHeader {
  uint64_t seq;       // the message sequence once whole (release store, last)
  uint64_t ready_ns;  // %globaltimer when the frame's result was ready
  uint32_t len;       // datagram bytes
  uint32_t output;
  uint32_t stream_id;
  uint32_t _reserved0;
  uint64_t _reserved1[4];
};

// The 64-byte message header (docs/wire-format.md, "Actuation messages").
struct ActuationHeader {
  uint32_t magic;
  uint8_t version;
  uint8_t parts;
  uint16_t header_len;
  uint32_t stream_id;
  uint16_t output;
  uint16_t flags;
  uint64_t frame_seq;
  uint64_t ring_seq;
  uint64_t sender_ts_ns;
  uint64_t message_seq;
  uint32_t param_generation;
  uint32_t payload_len;
  uint32_t sample_count;
  uint32_t _reserved;
};

// One output as the device former sees it.
struct TxOutput {
  uint32_t when;     // FL_ACT_WHEN_*
  uint32_t parts;    // FL_ACT_PART_*
  uint32_t samples;  // with FL_ACT_PART_SAMPLES: the first N samples at most
  uint32_t _reserved;
};

// The former's state and outputs (device memory; written by the host at
// set-up, then only by the former).
struct TxState {
  TxRingHeader* ring;  // mapped host memory, device address
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t max_datagram;
  uint32_t outputs;
  uint64_t head;                                 // the producer's copy of head_seq
  uint64_t consumed;                             // the last consumed_seq read (a PCIe read: only when full)
  uint64_t message_seq[FL_TX_MAX_OUTPUTS];       // messages formed per output
  TxOutput out[FL_TX_MAX_OUTPUTS];
};

static_assert(sizeof(TxRingHeader) == FL_TX_SLOTS_OFFSET, "TxRingHeader");
static_assert(sizeof(TxSlotHeader) == FL_TX_DATAGRAM_OFFSET, "TxSlotHeader");
static_assert(sizeof(ActuationHeader) == FL_ACT_HEADER_LEN, "ActuationHeader");
static_assert(sizeof(ResultRecord) % 16 == 0 && (FL_RESULT_USER_WORDS * 4) % 16 == 0,
              "the payload parts keep 16-byte alignment");

FL_DEVICE bool fl_actuation_fires(uint32_t when, const ResultRecord& r) {
  const bool detected = (r.result_flags & FL_RESULT_HAS_DETECT) != 0 && r.detect_count > 0;
  return when == FL_ACT_WHEN_EVERY || (when == FL_ACT_WHEN_DETECTION && detected) ||
         (when == FL_ACT_WHEN_FLAG && r.actuate_request != 0u);
}

// Copies `bytes` (a multiple of 16) from `from` to `to`, both 16-byte aligned,
// in 16-byte stores (the fewest PCIe writes into mapped memory).
FL_DEVICE void fl_copy16(void* to, const void* from, uint32_t bytes) {
  const uint4* f = (const uint4*)from;
  uint4* t = (uint4*)to;
  for (uint32_t i = 0; i < bytes / 16u; ++i) t[i] = f[i];
}

// Forms the messages of every output of `tx` that fires for the frame of
// `r` (final samples `samples`, `n` of them; `user` its user words) and
// publishes each into the transmit ring; a message that finds the ring full
// (or does not fit a slot) is dropped and counted for its output. Never
// waits. Run by one thread, after the frame's result record is published.
FL_DEVICE void fl_actuate(TxState* tx, const ResultRecord& r, const float* samples, uint32_t n) {
  const uint64_t ready_ns = r.done_ns;
  uint16_t flags = 0;
  if ((r.result_flags & FL_RESULT_HAS_DETECT) != 0 && r.detect_count > 0) flags |= FL_ACT_FLAG_DETECTED;
  if (r.actuate_request != 0u) flags |= FL_ACT_FLAG_USER_REQUEST;
  if ((r.slot_flags & FL_SLOT_INCOMPLETE) != 0) flags |= FL_ACT_FLAG_INCOMPLETE;
  for (uint32_t o = 0; o < tx->outputs && o < FL_TX_MAX_OUTPUTS; ++o) {
    const TxOutput out = tx->out[o];
    if (!fl_actuation_fires(out.when, r)) continue;
    const uint64_t message_seq = ++tx->message_seq[o];
    const uint64_t seq = tx->head + 1;
    const bool with_samples = (out.parts & FL_ACT_PART_SAMPLES) != 0;
    const uint32_t count = with_samples ? (n < out.samples ? n : out.samples) : 0u;
    const uint32_t payload = ((out.parts & FL_ACT_PART_RECORD) ? (uint32_t)sizeof(ResultRecord) : 0u) +
                             ((out.parts & FL_ACT_PART_USER) ? FL_RESULT_USER_WORDS * 4u : 0u) + count * 4u;
    // The ring looks full by the last consumed value read: read it again
    // (over the bus, so only then).
    if (seq - tx->consumed > tx->slot_count) tx->consumed = fl_load_acquire_sys(&tx->ring->consumed_seq);
    if (seq - tx->consumed > tx->slot_count || FL_ACT_HEADER_LEN + payload > tx->max_datagram) {
      atomicAdd((unsigned long long*)&tx->ring->dropped[o], 1ull);
      continue;
    }
    char* slot = (char*)tx->ring + FL_TX_SLOTS_OFFSET + ((seq - 1) % tx->slot_count) * (uint64_t)tx->slot_stride;
    char* datagram = slot + FL_TX_DATAGRAM_OFFSET;
    alignas(16) ActuationHeader h;
    h.magic = FL_ACT_MAGIC;
    h.version = FL_ACT_VERSION;
    h.parts = (uint8_t)out.parts;
    h.header_len = FL_ACT_HEADER_LEN;
    h.stream_id = r.stream_id;
    h.output = (uint16_t)o;
    h.flags = flags | ((with_samples && count < out.samples) ? FL_ACT_FLAG_SAMPLES_SHORT : 0u);
    h.frame_seq = r.frame_seq;
    h.ring_seq = r.ring_seq;
    h.sender_ts_ns = r.sender_ts_ns;
    h.message_seq = message_seq;
    h.param_generation = r.param_generation;
    h.payload_len = payload;
    h.sample_count = count;
    h._reserved = 0u;
    fl_copy16(datagram, &h, FL_ACT_HEADER_LEN);
    uint32_t at = FL_ACT_HEADER_LEN;
    if (out.parts & FL_ACT_PART_RECORD) {
      fl_copy16(datagram + at, &r, sizeof(ResultRecord));
      at += sizeof(ResultRecord);
    }
    if (out.parts & FL_ACT_PART_USER) {
      // The record's user words sit at offset 120: 4-byte stores.
      uint32_t* words = (uint32_t*)(datagram + at);
#pragma unroll
      for (int i = 0; i < FL_RESULT_USER_WORDS; ++i) words[i] = r.user[i];
      at += FL_RESULT_USER_WORDS * 4u;
    }
    // Whole 16-byte stores where both sides allow (the payload offset is a
    // multiple of 16; a buffer in shared or device memory is too), then the tail.
    float* to = (float*)(datagram + at);
    uint32_t i = 0;
    if (((uint64_t)samples & 15u) == 0u) {
      fl_copy16(to, samples, (count / 4u) * 16u);
      i = (count / 4u) * 4u;
    }
    for (; i < count; ++i) to[i] = samples[i];
    TxSlotHeader* sh = (TxSlotHeader*)slot;
    sh->ready_ns = ready_ns;
    sh->len = FL_ACT_HEADER_LEN + payload;
    sh->output = o;
    sh->stream_id = r.stream_id;
    fl_store_release_sys(&sh->seq, seq);
    fl_store_release_sys(&tx->ring->head_seq, seq);
    tx->head = seq;
  }
}
