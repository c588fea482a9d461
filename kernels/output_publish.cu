// output publish: the graph node after the chain's last operator (before the
// end marker publishes the result) that writes the frame's output into the
// output ring in device memory: the chain's final samples, and the slot head
// (the frame's ResultRecord, numbered as the end marker will publish it, and
// the user result words) both at the start of the device slot and in the
// control block's head table, between fl_output_begin and fl_output_end on
// the control block (host memory registered with cuMemHostRegister). Mirrors
// OutputWriter::publish of src/output/ring.rs.
#include "ops_common.cuh"
#include "output_ring.cuh"

#define FL_OUTPUT_THREADS 1024

// Where the node writes (src/gpu/output_publish.rs: OutputPublish).
struct OutputPublish {
  char* slots;               // the data region: device memory
  OutputControlHeader* ctl;  // the control block: device address of registered host memory
  const float* samples;      // the chain's final output buffer (device), or null
  uint64_t* written;         // device memory: the last output sequence written
  OutputSlotHead* heads;     // the control block's head table (device address)
  uint32_t slot_count;
  uint32_t slot_stride;
  uint32_t sample_capacity;  // floats a slot holds
  uint32_t buffer_capacity;  // floats the output buffer holds
};

static_assert(sizeof(OutputPublish) == 56, "OutputPublish");

// 32-bit words of a slot head: what threads 0.. copy, one word each.
#define FL_OUT_HEAD_WORDS (FL_OUT_SLOT_HEAD_BYTES / 4u)

// Block: FL_OUTPUT_THREADS threads; grid: one block (thread 0 marks the slot
// before any thread writes it and after every thread has).
extern "C" __global__ void __launch_bounds__(FL_OUTPUT_THREADS)
    fl_output_publish(LoopParams p, OutputPublish o) {
  fl_wait_for_prior_kernels();
  fl_let_dependents_launch();
  __shared__ uint64_t seq;
  __shared__ uint32_t kept;
  __shared__ OutputSlotHead head;
  DeviceLoopState* st = p.st;
  if (threadIdx.x == 0) {
    seq = *o.written + 1u;
    uint32_t n = o.samples == nullptr ? 0u : st->desc.n_samples;
    if (n > o.sample_capacity) n = o.sample_capacity;
    if (n > o.buffer_capacity) n = o.buffer_capacity;
    kept = n;
    fl_output_begin(o.ctl, o.slot_count, seq);
  }
  __syncthreads();
  char* slot = fl_output_slot(o.slots, o.slot_count, o.slot_stride, seq);
  float* dst = reinterpret_cast<float*>(slot + FL_OUT_SLOT_SAMPLES_OFFSET);
  const uint32_t n = kept;
  // Both arrays are 256-byte aligned: whole float4s, then the tail.
  const uint32_t n4 = n / 4u;
  for (uint32_t i = threadIdx.x; i < n4; i += FL_OUTPUT_THREADS) {
    reinterpret_cast<float4*>(dst)[i] = reinterpret_cast<const float4*>(o.samples)[i];
  }
  for (uint32_t i = n4 * 4u + threadIdx.x; i < n; i += FL_OUTPUT_THREADS) dst[i] = o.samples[i];
  if (threadIdx.x == 0) {
    ResultRecord r = fl_make_record(p, st->desc, st->chain, st->slot, st->result_seq + 1u);
    r.output_len = n;
    head.record = r;
#pragma unroll
    for (int i = 0; i < (int)FL_OUT_USER_RESULT_WORDS; ++i) head.user[i] = st->user[i];
#pragma unroll
    for (int i = 0; i < 4; ++i) head._pad[i] = 0u;
  }
  __syncthreads();
  // The head, a word per thread, to the device slot and to the control
  // block's copy (posted writes over the bus, issued in parallel).
  if (threadIdx.x < FL_OUT_HEAD_WORDS) {
    const uint32_t w = reinterpret_cast<const uint32_t*>(&head)[threadIdx.x];
    reinterpret_cast<uint32_t*>(slot)[threadIdx.x] = w;
    reinterpret_cast<uint32_t*>(fl_output_head_copy(o.heads, o.slot_count, seq))[threadIdx.x] = w;
  }
  // Every thread's stores are visible system-wide before thread 0 marks the slot whole.
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0) {
    fl_output_end(o.ctl, o.slot_count, seq);
    *o.written = seq;
  }
}
