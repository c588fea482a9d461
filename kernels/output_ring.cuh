// frameloop output ring: the CUDA mirror of src/output/layout.rs. The data
// region (device memory, cuMemAlloc, exported with cuIpcGetMemHandle) holds
// slot_count slots of slot_stride bytes: a slot head (ResultRecord, then the
// user result words at FL_OUT_SLOT_USER_OFFSET) at 0 and the chain's final
// f32 samples at FL_OUT_SLOT_SAMPLES_OFFSET. The control block (host memfd,
// registered with cuMemHostRegister so the device can write it) holds the
// head sequence, one sequence word per slot and, at heads_offset, a copy of
// each slot's head, which consumers read without a device copy. tests/output_layout.rs checks every size and
// offset below against the Rust values.
//
// Publishing output sequence seq (1-based) into slot (seq - 1) % slot_count,
// from one thread after the slot's contents are written by the block(s):
//   fl_output_begin(ctl, slot_count, seq)   slot word = 2*seq + 1 (odd: writing)
//   ... write the slot head (both copies) and the samples ...
//   fl_output_end(ctl, slot_count, seq)     slot word = 2*seq, then head = seq
// begin must precede the first store of the slot and end follow the last
// (a kernel boundary or __syncthreads + __threadfence_system between).
#pragma once
#include "ring.cuh"

#define FL_OUTPUT_MAGIC 0x54554f46u  // "FOUT" little-endian
#define FL_OUTPUT_LAYOUT_VERSION 2u
#define FL_OUT_SLOT_SEQS_OFFSET 128u
#define FL_OUT_MAX_CONSUMERS 16u
#define FL_OUT_SLOT_USER_OFFSET 192u
#define FL_OUT_USER_RESULT_WORDS 12u
#define FL_OUT_SLOT_HEAD_BYTES 256u
#define FL_OUT_SLOT_SAMPLES_OFFSET 256u
#define FL_OUT_SLOT_ALIGN 256u
#define FL_OUT_MEMORY_HOST_MEMFD 1u
#define FL_OUT_MEMORY_CUDA_DEVICE 2u

struct alignas(64) OutputControlHeader {
  uint32_t magic;
  uint32_t version;
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t sample_capacity;
  uint32_t memory_kind;
  int32_t device_ordinal;
  uint32_t consumers_offset;
  uint64_t data_bytes;
  uint32_t heads_offset;  // the slot-head table: slot_count x FL_OUT_SLOT_HEAD_BYTES
  uint32_t _reserved0;
  uint64_t _reserved1[2];
  uint64_t head_seq;  // writer: release store after the slot word
  uint64_t _pad1[7];
  // uint64_t slot_seq[slot_count] follows at FL_OUT_SLOT_SEQS_OFFSET.
};

struct alignas(64) OutputConsumerWord {
  uint64_t attached;       // the appliance's attach server
  uint64_t last_read_seq;  // the consumer
  uint64_t _pad[6];
};

// The fixed part of a slot (samples follow at FL_OUT_SLOT_SAMPLES_OFFSET),
// and one entry of the control block's head table.
struct OutputSlotHead {
  ResultRecord record;
  uint32_t user[FL_OUT_USER_RESULT_WORDS];
  uint32_t _pad[4];
};

static_assert(sizeof(OutputControlHeader) == FL_OUT_SLOT_SEQS_OFFSET, "OutputControlHeader");
static_assert(sizeof(OutputConsumerWord) == 64, "OutputConsumerWord");
static_assert(sizeof(ResultRecord) == FL_OUT_SLOT_USER_OFFSET, "ResultRecord ends where user words start");
static_assert(sizeof(OutputSlotHead) == FL_OUT_SLOT_HEAD_BYTES, "OutputSlotHead");
static_assert(FL_OUT_SLOT_HEAD_BYTES <= FL_OUT_SLOT_SAMPLES_OFFSET, "OutputSlotHead");

// The geometry helpers take the slot count and stride from the caller (kernel
// arguments): the control block is host memory, a read of it crosses PCIe.
FL_DEVICE uint64_t* fl_output_slot_seq(OutputControlHeader* ctl, uint32_t slot_count, uint64_t seq) {
  uint64_t* words = reinterpret_cast<uint64_t*>(reinterpret_cast<char*>(ctl) + FL_OUT_SLOT_SEQS_OFFSET);
  return words + (seq - 1) % slot_count;
}

// The control block's copy of the head of seq's slot; `heads` is the table's
// device address (control block + heads_offset, from the caller).
FL_DEVICE OutputSlotHead* fl_output_head_copy(OutputSlotHead* heads, uint32_t slot_count, uint64_t seq) {
  return heads + (seq - 1) % slot_count;
}

FL_DEVICE char* fl_output_slot(char* slots, uint32_t slot_count, uint32_t slot_stride, uint64_t seq) {
  return slots + ((seq - 1) % slot_count) * (uint64_t)slot_stride;
}

FL_DEVICE void fl_output_begin(OutputControlHeader* ctl, uint32_t slot_count, uint64_t seq) {
  *(volatile uint64_t*)fl_output_slot_seq(ctl, slot_count, seq) = (seq << 1) | 1u;
  __threadfence_system();
}

FL_DEVICE void fl_output_end(OutputControlHeader* ctl, uint32_t slot_count, uint64_t seq) {
  __threadfence_system();
  *(volatile uint64_t*)fl_output_slot_seq(ctl, slot_count, seq) = seq << 1;
  __threadfence_system();
  *(volatile uint64_t*)&ctl->head_seq = seq;
}
