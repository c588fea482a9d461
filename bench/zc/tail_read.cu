// How long a resident kernel takes to read the last part of a frame (what
// one receive batch leaves after the frame's last packet) out of mapped
// pinned host memory, by how the host left those bytes:
//   cold       written long before (in memory, not in the CPU's cache)
//   fresh      written by the CPU just before the flag (still in its cache)
//   clwb       fresh, then written back from the cache (clwb + sfence)
//   clflushopt fresh, then flushed from the cache (clflushopt + sfence)
//   nt         written with non-temporal stores (movntdq + sfence)
// and, for each, the host's cost of the write back. A persistent grid
// waits on a flag in host memory; every block reads its share of the part
// with four 16-byte loads in flight per thread; the time is from the
// first block seeing the flag to the last block done (globaltimer), so no
// launch is in it. Parts rotate through a 256 MiB area (no L2 hits).
//
// Build: nvcc -O2 -arch=sm_90 -Xcompiler -mclwb,-mclflushopt -o tail_read tail_read.cu
// Usage: tail_read [PART_BYTES] [BLOCKS] [ITERATIONS]   (65536 132 400)
#include <cuda_runtime.h>
#include <immintrin.h>
#include <time.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

struct Control {
  volatile uint64_t go;     // host -> GPU: iteration + 1, the part's offset in `offset`
  volatile uint64_t offset;
  volatile uint64_t done;   // GPU -> host: iteration + 1 once every block read it
};

__device__ __forceinline__ uint64_t gtimer() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Block 0 polls the flag in host memory (as the appliance's handler does)
// and passes the part on through device memory to the other blocks.
__global__ void __launch_bounds__(1024) reader(Control* ctl, const uint4* area, uint64_t words, int iterations,
                                               volatile uint64_t* relay, unsigned* arrived, uint64_t* seen,
                                               uint64_t* finished, unsigned* sink) {
  __shared__ uint64_t offset;
  unsigned acc = 0;
  for (int it = 0; it < iterations; ++it) {
    if (threadIdx.x == 0) {
      if (blockIdx.x == 0) {
        while (ctl->go < (uint64_t)it + 1) {
        }
        seen[it] = gtimer();
        offset = ctl->offset;
        relay[1] = offset;
        __threadfence();
        relay[0] = (uint64_t)it + 1;
      } else {
        while (relay[0] < (uint64_t)it + 1) {
        }
        __threadfence();
        offset = relay[1];
      }
    }
    __syncthreads();
    const uint4* p = area + offset / 16;
    const uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
    for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < words; i += 4 * stride) {
      uint4 v[4];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const uint64_t j = i + k * stride;
        v[k] = j < words ? __ldcv(p + j) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int k = 0; k < 4; ++k) acc += v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      if (atomicAdd(&arrived[it], 1u) == gridDim.x - 1) {
        finished[it] = gtimer();
        __threadfence_system();
        ctl->done = (uint64_t)it + 1;
      }
    }
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;
}

static double now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

enum Mode { COLD, FRESH, CLWB, CLFLUSHOPT, NT, MODES };
static const char* NAMES[MODES] = {"cold", "fresh", "clwb", "clflushopt", "nt"};

static void write_part(uint8_t* dst, size_t n, uint64_t seed, Mode m) {
  if (m == NT) {
    for (size_t i = 0; i < n; i += 16) {
      const __m128i v = _mm_set_epi64x((long long)(seed + i), (long long)(seed ^ i));
      _mm_stream_si128((__m128i*)(dst + i), v);
    }
    return;
  }
  for (size_t i = 0; i < n; i += 16) {
    const uint64_t v[2] = {seed ^ i, seed + i};
    memcpy(dst + i, v, 16);
  }
}

static void write_back(uint8_t* p, size_t n, Mode m) {
  if (m == CLWB)
    for (size_t i = 0; i < n; i += 64) _mm_clwb(p + i);
  if (m == CLFLUSHOPT)
    for (size_t i = 0; i < n; i += 64) _mm_clflushopt(p + i);
  _mm_sfence();
}

int main(int argc, char** argv) {
  const size_t part = argc > 1 ? strtoull(argv[1], nullptr, 0) : 65536;
  int blocks = argc > 2 ? atoi(argv[2]) : 0;
  const int iterations = argc > 3 ? atoi(argv[3]) : 400;
  const size_t area_bytes = 256u << 20;
  if (part == 0 || part % 64 != 0 || part > area_bytes / 4) {
    fprintf(stderr, "PART_BYTES must be a multiple of 64 and at most %zu\n", area_bytes / 4);
    return 2;
  }
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  if (blocks <= 0) blocks = prop.multiProcessorCount;
  uint8_t* area;
  Control* ctl;
  CHECK(cudaHostAlloc((void**)&area, area_bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc((void**)&ctl, sizeof(Control), cudaHostAllocMapped));
  for (size_t i = 0; i < area_bytes; i += 4096) memset(area + i, 0x5a, 4096);
  uint8_t* area_d;
  Control* ctl_d;
  CHECK(cudaHostGetDevicePointer((void**)&area_d, area, 0));
  CHECK(cudaHostGetDevicePointer((void**)&ctl_d, ctl, 0));
  unsigned *arrived, *sink;
  uint64_t *seen, *finished, *relay;
  CHECK(cudaMalloc(&relay, 2 * sizeof(uint64_t)));
  CHECK(cudaMalloc(&arrived, iterations * sizeof(unsigned)));
  CHECK(cudaMalloc(&seen, iterations * sizeof(uint64_t)));
  CHECK(cudaMalloc(&finished, iterations * sizeof(uint64_t)));
  CHECK(cudaMalloc(&sink, blocks * sizeof(unsigned)));
  printf("GPU %s, %d SMs; part %zu B, %d blocks of 1024 threads, %d parts per mode; µs\n", prop.name,
         prop.multiProcessorCount, part, blocks, iterations);
  printf("%-11s %8s %8s %8s %8s   %s\n", "mode", "p10", "p50", "p90", "GB/s@p50", "host write-back p50");
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  for (int m = 0; m < MODES; ++m) {
    CHECK(cudaMemset(arrived, 0, iterations * sizeof(unsigned)));
    CHECK(cudaMemset(relay, 0, 2 * sizeof(uint64_t)));
    CHECK(cudaDeviceSynchronize());
    ctl->go = 0, ctl->done = 0, ctl->offset = 0;
    const size_t places = area_bytes / part;
    std::vector<size_t> offsets(iterations);
    for (int it = 0; it < iterations; ++it) offsets[it] = ((size_t)it * 7919 % places) * part;
    if (m == COLD)
      for (int it = 0; it < iterations; ++it) write_part(area + offsets[it], part, it, FRESH);
    reader<<<blocks, 1024, 0, s>>>(ctl_d, (const uint4*)area_d, part / 16, iterations, relay, arrived, seen,
                                   finished, sink);
    CHECK(cudaGetLastError());
    std::vector<double> flush_ns;
    for (int it = 0; it < iterations; ++it) {
      uint8_t* p = area + offsets[it];
      if (m != COLD) write_part(p, part, 1000003u * it + m, (Mode)m);
      const double t0 = now_ns();
      if (m == CLWB || m == CLFLUSHOPT) write_back(p, part, (Mode)m);
      if (m == NT) _mm_sfence();
      flush_ns.push_back(now_ns() - t0);
      ctl->offset = offsets[it];
      __atomic_store_n((uint64_t*)&ctl->go, (uint64_t)it + 1, __ATOMIC_RELEASE);
      const double deadline = now_ns() + 2e9;
      while (ctl->done < (uint64_t)it + 1) {
        if (now_ns() > deadline) {
          fprintf(stderr, "%s: the GPU did not finish part %d within 2 s\n", NAMES[m], it);
          return 1;
        }
      }
      const double pause = now_ns() + 20e3;  // let the link settle between parts
      while (now_ns() < pause) {
      }
    }
    CHECK(cudaStreamSynchronize(s));
    std::vector<uint64_t> hs(iterations), hf(iterations);
    CHECK(cudaMemcpy(hs.data(), seen, iterations * 8, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hf.data(), finished, iterations * 8, cudaMemcpyDeviceToHost));
    std::vector<double> us;
    for (int it = 10; it < iterations; ++it) us.push_back((hf[it] - hs[it]) / 1e3);
    std::sort(us.begin(), us.end());
    std::sort(flush_ns.begin(), flush_ns.end());
    const double p50 = us[us.size() / 2];
    printf("%-11s %8.2f %8.2f %8.2f %8.1f   %.2f\n", NAMES[m], us[us.size() / 10], p50, us[us.size() * 9 / 10],
           part / p50 / 1e3, flush_ns[flush_ns.size() / 2] / 1e3);
    fflush(stdout);
  }
  // The copy engine on the same fresh bytes, timed on the host from the call
  // to its completion (the launch is in it, unlike the figures above).
  uint8_t* dev;
  CHECK(cudaMalloc(&dev, part));
  for (int wb = 0; wb < 2; ++wb) {
    std::vector<double> us;
    for (int it = 0; it < 200; ++it) {
      uint8_t* p = area + ((size_t)it * 7919 % (area_bytes / part)) * part;
      write_part(p, part, it, FRESH);
      if (wb) write_back(p, part, CLWB);
      const double t0 = now_ns();
      CHECK(cudaMemcpyAsync(dev, p, part, cudaMemcpyHostToDevice, s));
      CHECK(cudaStreamSynchronize(s));
      if (it >= 10) us.push_back((now_ns() - t0) / 1e3);
    }
    std::sort(us.begin(), us.end());
    printf("copy engine, %s: p50 %.2f µs (call to completion)\n", wb ? "clwb first" : "fresh", us[us.size() / 2]);
  }
  return 0;
}
