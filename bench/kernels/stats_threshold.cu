// The default chain's stats and threshold as one user kernel: one block
// reduces the frame into the user result words (0: sum as f32 bits, 1: min,
// 2: max, 3: mean, 4: samples above `level`, 5: the first such index or
// 0xffffffff), and writes the sum as its one output sample. Each warp
// reduces its threads' partials with shuffles, then the first warp reduces
// the warps' partials: two barriers, as the built-in fl_stats_threshold.
// Config: params = { level = 8.0 }, param_types = ["level: f32"],
//         output = { samples = 1 }, blocks = 1, threads = 1024
#include "frameloop.cuh"

#define ST_THREADS 1024
#define ST_WARPS (ST_THREADS / 32)

struct StatsThreshold {
  float level;
};

struct StPartial {
  double sum;
  float lo, hi;
  uint32_t count, first;
};

__device__ __forceinline__ StPartial st_warp_reduce(StPartial p) {
#pragma unroll
  for (int d = 16; d > 0; d /= 2) {
    const double sum = __shfl_down_sync(0xffffffffu, p.sum, d);
    const float lo = __shfl_down_sync(0xffffffffu, p.lo, d);
    const float hi = __shfl_down_sync(0xffffffffu, p.hi, d);
    const uint32_t count = __shfl_down_sync(0xffffffffu, p.count, d);
    const uint32_t first = __shfl_down_sync(0xffffffffu, p.first, d);
    p.sum += sum;
    p.lo = fminf(p.lo, lo);
    p.hi = fmaxf(p.hi, hi);
    p.count += count;
    p.first = first < p.first ? first : p.first;
  }
  return p;
}

extern "C" __global__ void __launch_bounds__(ST_THREADS)
    stats_threshold(const fl_frame* frame, const float* in, float* out, const void* params, fl_user_result* user) {
  const StatsThreshold* p = FL_PARAMS(StatsThreshold, params);
  __shared__ StPartial s_warp[ST_WARPS];
  const uint32_t t = threadIdx.x, lane = t % 32u, warp = t / 32u;
  const uint32_t n = frame->in_count;
  const float level = p->level;
  StPartial acc = {0.0, __int_as_float(0x7f800000), __int_as_float(0xff800000), 0u, 0xffffffffu};
  for (uint32_t i = t; i < n; i += blockDim.x) {
    const float x = in[i];
    acc.sum += (double)x;
    acc.lo = fminf(acc.lo, x);
    acc.hi = fmaxf(acc.hi, x);
    if (x > level) {
      ++acc.count;
      if (i < acc.first) acc.first = i;
    }
  }
  acc = st_warp_reduce(acc);
  if (lane == 0) s_warp[warp] = acc;
  __syncthreads();
  if (warp != 0) return;
  const uint32_t warps = (blockDim.x + 31u) / 32u;
  if (lane < warps) {
    acc = s_warp[lane];
  } else {
    acc = StPartial{0.0, __int_as_float(0x7f800000), __int_as_float(0xff800000), 0u, 0xffffffffu};
  }
  acc = st_warp_reduce(acc);
  if (lane != 0) return;
  const bool empty = n == 0;
  const float total = (float)acc.sum;
  user->words[0] = __float_as_uint(total);
  user->words[1] = __float_as_uint(empty ? 0.0f : acc.lo);
  user->words[2] = __float_as_uint(empty ? 0.0f : acc.hi);
  user->words[3] = __float_as_uint(empty ? 0.0f : (float)(acc.sum / n));
  user->words[4] = acc.count;
  user->words[5] = acc.first;
  if (frame->out_count > 0) out[0] = total;
}
