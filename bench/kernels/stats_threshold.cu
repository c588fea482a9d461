// The default chain's stats and threshold as one user kernel: one block
// reduces the frame into the user result words (0: sum as f32 bits, 1: min,
// 2: max, 3: mean, 4: samples above `level`, 5: the first such index or
// 0xffffffff), and writes the sum as its one output sample.
// Config: params = { level = 8.0 }, param_types = ["level: f32"],
//         output = { samples = 1 }, blocks = 1, threads = 1024
#include "frameloop.cuh"

#define ST_THREADS 1024

struct StatsThreshold {
  float level;
};

extern "C" __global__ void __launch_bounds__(ST_THREADS)
    stats_threshold(const fl_frame* frame, const float* in, float* out, const void* params, fl_user_result* user) {
  const StatsThreshold* p = FL_PARAMS(StatsThreshold, params);
  __shared__ double s_sum[ST_THREADS];
  __shared__ float s_min[ST_THREADS];
  __shared__ float s_max[ST_THREADS];
  __shared__ uint32_t s_count[ST_THREADS];
  __shared__ uint32_t s_first[ST_THREADS];
  const uint32_t t = threadIdx.x;
  const uint32_t n = frame->in_count;
  double sum = 0.0;
  float lo = __int_as_float(0x7f800000), hi = __int_as_float(0xff800000);
  uint32_t count = 0, first = 0xffffffffu;
  for (uint32_t i = t; i < n; i += blockDim.x) {
    const float x = in[i];
    sum += (double)x;
    lo = fminf(lo, x);
    hi = fmaxf(hi, x);
    if (x > p->level) {
      ++count;
      if (i < first) first = i;
    }
  }
  s_sum[t] = sum;
  s_min[t] = lo;
  s_max[t] = hi;
  s_count[t] = count;
  s_first[t] = first;
  __syncthreads();
  for (uint32_t half = blockDim.x / 2; half > 0; half /= 2) {
    if (t < half) {
      s_sum[t] += s_sum[t + half];
      s_min[t] = fminf(s_min[t], s_min[t + half]);
      s_max[t] = fmaxf(s_max[t], s_max[t + half]);
      s_count[t] += s_count[t + half];
      s_first[t] = s_first[t] < s_first[t + half] ? s_first[t] : s_first[t + half];
    }
    __syncthreads();
  }
  if (t != 0) return;
  const bool empty = n == 0;
  const float total = (float)s_sum[0];
  user->words[0] = __float_as_uint(total);
  user->words[1] = __float_as_uint(empty ? 0.0f : s_min[0]);
  user->words[2] = __float_as_uint(empty ? 0.0f : s_max[0]);
  user->words[3] = __float_as_uint(empty ? 0.0f : (float)(s_sum[0] / n));
  user->words[4] = s_count[0];
  user->words[5] = s_first[0];
  if (frame->out_count > 0) out[0] = total;
}
