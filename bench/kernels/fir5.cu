// The default chain's 5-tap FIR as a user kernel: y[i] = sum_k t[k] * x[i + k - 2],
// zero outside the frame; products and sums rounded separately in the CPU's
// order, as the built-in fl_fir computes them. One thread per sample.
// Config: params = { t0 = ..., t4 = ... }, param_types = ["t0: f32", ..., "t4: f32"]
#include "frameloop.cuh"

struct Fir5 {
  float t[5];
};

extern "C" __global__ void fir5(const fl_frame* frame, const float* in, float* out, const void* params,
                                fl_user_result* user) {
  const Fir5* p = FL_PARAMS(Fir5, params);
  const uint32_t i = fl_thread_index();
  const uint32_t n = frame->in_count < frame->out_count ? frame->in_count : frame->out_count;
  if (i >= n) return;
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < 5; ++k) {
    const int64_t j = (int64_t)i + k - 2;
    const float x = (j >= 0 && j < (int64_t)n) ? in[j] : 0.0f;
    acc = __fadd_rn(acc, __fmul_rn(p->t[k], x));
  }
  out[i] = acc;
}
